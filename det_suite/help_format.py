"""argparse help that shows an option's default only where it has a real one."""

from __future__ import annotations

import argparse


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Like argparse.ArgumentDefaultsHelpFormatter, but without "(default: None)" on options
    that have no default, "(default: False)" on flags, or a second default where the help
    text already names one."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (action.default not in (None, False, argparse.SUPPRESS) and "default" not in text
                and (action.option_strings or action.nargs in ("?", "*"))):
            text += " (default: %(default)s)"
        return text
