"""Triton kernels. One kernel per module; every reduction here has a schedule fixed by
(N, K, dtype, arch) and never by the number of rows M."""
