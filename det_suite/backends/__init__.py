"""Backends behind one interface (`interface`): the embedded engine (`embedded`) and SGLang (`sglang`: plugin, server, HTTP client)."""
