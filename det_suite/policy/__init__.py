"""Tile policy: per-GPU-family tables stored as data, chosen by (family, N, K).

A table entry fixes everything that shapes the reduction (BLOCK_K, SPLIT_K, BLOCK_N, the
MMA family the tiles compile to). M chooses only among the entry's `m_tiles`, each of
which must compile to the same MMA instruction along K (checked by `det-suite lint-policy`)
and may also pick free launch parameters (warps, stages, workspace vs single pass).

- `tiles`         what a table holds (LaunchConfig, MTile, TableEntry, TilePolicy) and how
                  an entry selects a config for M
- `table_format`  the JSON format: parser and writer, and the shipped tables (`tables/`)
"""

from det_suite.policy.table_format import (M_TILE_KEYS, PDL_FAMILIES, SWAP_AB_FAMILIES,
                                           entry_json, load_policy_file, m_tile_json,
                                           m_tile_text, parse_entry, parse_payload, parse_policy,
                                           policy_json, shipped_families, shipped_policy,
                                           write_policy_file)
from det_suite.policy.tiles import (L2_LINE_ELEMENTS, SUPPORTED_STAGES, SWAP_FALLBACK_BLOCK_M,
                                    LaunchConfig, MTile, TableEntry, TileParams, TilePolicy,
                                    validate_stages)

__all__ = ["L2_LINE_ELEMENTS", "M_TILE_KEYS", "PDL_FAMILIES", "SUPPORTED_STAGES",
           "SWAP_AB_FAMILIES", "SWAP_FALLBACK_BLOCK_M", "LaunchConfig", "MTile", "TableEntry",
           "TileParams", "TilePolicy",
           "entry_json", "load_policy_file", "m_tile_json", "m_tile_text", "parse_entry",
           "parse_payload", "parse_policy", "policy_json", "shipped_families", "shipped_policy",
           "validate_stages", "write_policy_file"]
