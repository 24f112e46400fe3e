"""Cache-hit matrix: same selected-token logprobs cold and after a prefix-cache hit, alone or batched, graph or eager (issue 12)."""
