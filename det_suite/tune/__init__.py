"""Regenerate a tile table for the GPU this runs on, rejecting anything not batch-invariant.

For each (N, K) the tuner searches *reductions* — (BLOCK_N, BLOCK_K, SPLIT_K), fixed per
entry because BLOCK_K and SPLIT_K are the reduction schedule (BLOCK_N does not change the
bits on SM90, docs/invariance-rule.md, but the table keeps it per (N, K) anyway) — and, inside each, the
launch *variants* M may choose: BLOCK_M from the family's instruction-safe set, warps,
pipeline stages, and the split-K workspace for small M.

Search, bounded by a time budget (device time is scarce):

1. Screen: every reduction (split counts limited by the K tiles, and by MAX_SMALL_M_WAVES
   where N alone already fills the GPU) timed with one representative variant per M of
   `screen_ms` (default 1, 16, 128, 2048, 8192); ranked by the geometric mean over M of
   (its time / the best reduction's time at that M). The best `keep` go on.
2. Sweep: for each finalist and each M of `class_ms`, one axis at a time around the
   representative variant (warps, stages, BLOCK_M, workspace and its fused fix-up, TMA
   loads where the family has TMA), then the combination of the per-axis winners. Each
   M-class keeps its fastest variant; adjacent classes with the same variant merge.
3. Prove: the chosen entry must pass `check_entry` before it is stored: accuracy against
   a float64 reference, then bitwise invariance through the invariance package's prover
   (`invariance.compare.prove_entry`) on dense and on its cancellation-stress operands: rows of m-row calls (m in `check_ms`, prefix and suffix subsets) equal the
   same rows of a `check_big_m`-row call, first with the tile M selects, then with every
   m_tile variant forced, each also at num_stages 2 and 3. A rejected entry is listed
   (with the first differing m) and the next finalist tried; if every finalist fails, one
   variant for all M is tried; failing that, the (N, K) keeps the base table's entry.

`budget_s` bounds the whole run: each shape gets its share of the remaining budget (the
first shape, which compiles most kernels, a double share), searches for
(1 - CHECK_RESERVE) of it and proves its entry in the rest (checks are never skipped, so
the last shape may overrun by its check time).

Timing uses `det_suite.bench.timing.flushed_median_us` (L2 flushed before every call: a
layer's weight comes from HBM in a real forward pass). Kernels for a batch of candidates
are compiled in parallel threads first (Triton's AsyncCompileMode) when available.

The output is a policy JSON in the format of det_suite/policy/tables/*.json
(det_suite.policy.table_format) plus a `tuned_on` block and a `tuning` report, written
atomically.

Modules: `space` (reductions, variants, what is worth timing), `m_classes` (timings to
m_tiles and an entry), `prove` (accuracy and invariance checks), `precompile` (parallel
compilation through ops' compile launcher), `tuner` (settings, the search, outcomes),
`output` (the written table), `job` (`tune_table(TuneJob)`, what `det-suite tune` calls).
"""

from det_suite.tune.job import TuneJob, TuneRun, TuneUsageError, resolve_family, tune_table
from det_suite.tune.m_classes import build_m_tiles, class_bounds, make_entry, rank_reductions
from det_suite.tune.output import SCHEMA, tuned_on, tuned_policy_json, write_tuned_policy
from det_suite.tune.precompile import GemmLaunch, precompile_launches
from det_suite.tune.prove import (ACCURACY_M, CHECK_BIG_M, CHECK_DATA, CHECK_MS, CHECK_STAGES,
                                  CHECK_SUBSETS, CheckFailure, CheckResult, EntryLike,
                                  check_entry, check_entry_accuracy, check_invariance)
from det_suite.tune.space import (AXES, BLOCK_K_CHOICES, BLOCK_N_CHOICES, CLASS_MS,
                                  FAMILY_BLOCK_M, GROUP_M, MAX_ACC_REGS_PER_THREAD,
                                  MAX_SMALL_M_WAVES, SCREEN_MS, SPLIT_K_CHOICES,
                                  STAGE_CHOICES, SWAP_BLOCK_M, SWAP_MAX_M, TMA_FAMILIES,
                                  WARP_CHOICES, WORKSPACE_MAX_M, Reduction, Variant,
                                  accumulator_fits, axis_variants, block_m_choices,
                                  combine_axes, family_block_ms, k_tiles, launch_config,
                                  order_reductions, reduction_candidates,
                                  representative_variant, swap_block_m_choices, swap_variant,
                                  tma_allowed, valid_split_ks, variant_space,
                                  workspace_allowed)
from det_suite.tune.tuner import (CHECK_RESERVE, FIRST_SHAPE_WEIGHT, SCREEN_SHARE,
                                  ShapeOutcome, Tuner, TuneSettings)

__all__ = ["ACCURACY_M", "AXES", "BLOCK_K_CHOICES", "BLOCK_N_CHOICES", "CHECK_BIG_M",
           "CHECK_DATA", "CHECK_MS", "CHECK_RESERVE", "CHECK_STAGES", "CHECK_SUBSETS",
           "CLASS_MS", "CheckFailure", "CheckResult", "EntryLike", "FAMILY_BLOCK_M",
           "FIRST_SHAPE_WEIGHT", "GROUP_M", "GemmLaunch", "MAX_ACC_REGS_PER_THREAD",
           "MAX_SMALL_M_WAVES", "Reduction", "SCHEMA", "SCREEN_MS", "SCREEN_SHARE",
           "SPLIT_K_CHOICES", "STAGE_CHOICES", "SWAP_BLOCK_M", "SWAP_MAX_M",
           "ShapeOutcome", "TMA_FAMILIES", "TuneJob", "TuneRun", "TuneSettings",
           "TuneUsageError", "Tuner", "Variant", "WARP_CHOICES", "WORKSPACE_MAX_M",
           "accumulator_fits", "axis_variants", "block_m_choices", "build_m_tiles",
           "check_entry", "check_entry_accuracy", "check_invariance", "class_bounds",
           "combine_axes", "family_block_ms", "k_tiles", "launch_config", "make_entry",
           "order_reductions", "precompile_launches", "rank_reductions",
           "reduction_candidates", "representative_variant", "resolve_family",
           "swap_block_m_choices", "swap_variant", "tma_allowed", "tune_table",
           "tuned_on", "tuned_policy_json", "valid_split_ks", "variant_space",
           "workspace_allowed", "write_tuned_policy"]
