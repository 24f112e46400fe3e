"""Progress output (platform.progress): a live tqdm bar on a terminal; in a CI log, where
stderr is no terminal, a few plain lines instead of a `\\r` frame per update (issue 38)."""

import io

from det_suite.platform import progress


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_log_gets_plain_lines_not_carriage_return_frames(monkeypatch):
    log = io.StringIO()
    bar = progress.progress_bar(total=5000, unit="row", desc="gsm8k det", file=log)
    for _ in range(5000):
        bar.update(1)
    bar.close()
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    # mininterval keeps a fast loop to its first and last lines, not 5000 frames.
    assert 1 <= len(lines) <= 3 and "5000/5000" in lines[-1], lines


def test_a_slow_loop_in_a_log_prints_a_line_per_interval(monkeypatch):
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)
    log = io.StringIO()
    bar = progress.progress_bar(total=3, desc="hashing", file=log, leave=False)
    for _ in range(3):
        bar.update(1)
    bar.close()
    lines = log.getvalue().splitlines()
    assert len(lines) >= 3 and lines[-1].startswith("hashing") and "3/3" in lines[-1]


def test_a_terminal_gets_tqdms_live_bar():
    """Control: on a terminal the frames are tqdm's own, `\\r`-led."""
    tty = _Terminal()
    bar = progress.progress_bar(total=3, file=tty, mininterval=0)
    for _ in range(3):
        bar.update(1)
    bar.close()
    assert "\r" in tty.getvalue()
