"""GSM8K as a fixed body of work: the data (hub, local file or a generated GSM8K-schema set,
all through `datasets`), the prompt format, answer extraction, and the fixture format that
records per-row hashes of questions, output texts and output token ids (issue 13).

The check that runs a backend over it is `det_suite.checks.gsm8k`; the comparison of any two
runs' outputs is `det_suite.checks.fixed_work`. See docs/gsm8k.md.
"""
