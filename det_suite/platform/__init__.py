"""What det-suite runs on: GPU family and capability (`family`), a snapshot of the machine
(`hardware`), the interpreter switch (`interpreter`) and the interpreter's GPU-faithful
numerics (`gpu_faithful_interpreter`)."""

from det_suite.platform.family import (ARCH_OVERRIDE_ENV, DEFAULT_FAMILY, INTERPRETER_FAMILY,
                                       KNOWN_FAMILIES, device_family, family_of_capability,
                                       family_source, resolve_family, validate_family)
from det_suite.platform.interpreter import INTERPRET_ENV, interpreter_active

__all__ = ["ARCH_OVERRIDE_ENV", "DEFAULT_FAMILY", "INTERPRETER_FAMILY", "INTERPRET_ENV",
           "KNOWN_FAMILIES", "device_family", "family_of_capability", "family_source",
           "interpreter_active", "resolve_family", "validate_family"]
