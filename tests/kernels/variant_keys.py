"""Triton's specialisation key of every launch of a call, for sizes given on the command line (run as
a script, without TRITON_INTERPRET, so the kernels are compiled functions; no GPU needed).

    python tests/kernels/variant_keys.py METHOD HAS_DRAFT VOCAB R K [R K ...]

Prints one line per (R, K): the keys of the call's launches as the simulator makes them (rows through
a row table) under one plan (the plan of the first R, K, so that only what Triton itself specialises
can differ). Two calls whose lines are equal
compile to the same kernels.
"""

import dataclasses
import os
import sys

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("variant_keys.py must run without TRITON_INTERPRET=1")

import torch  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

from spectune.kernels import _decision, _launcher, _residual_kernel, _small_grid, _verify_kernel  # noqa: E402
from spectune.kernels._arguments import RowTable, Sizes, allocate_workspace  # noqa: E402
from spectune.kernels._contract import METHODS, validate_inputs  # noqa: E402
from spectune.kernels._plan import plan  # noqa: E402

BACKEND = make_backend(GPUTarget("cuda", 90, 32))


def key(kernel, *args):
    """The specialisation Triton derives from these arguments (what its cache key is made of)."""
    binder = create_function_from_signature(kernel.signature, kernel.params, BACKEND)
    _, specialization, _ = binder(*args)
    return repr(specialization)


def call_keys(method, has_draft, vocab, num_requests, num_drafts, chosen):
    target = torch.zeros(num_requests, num_drafts + 1, vocab)
    draft = torch.zeros(num_requests, num_drafts, vocab) if has_draft else None
    inputs = validate_inputs(
        target,
        torch.zeros(num_requests, num_drafts, dtype=torch.int64),
        draft,
        torch.ones(num_requests),
        torch.zeros(num_requests, dtype=torch.int64),
        method,
        torch.ones(num_drafts) if method == "synthetic" else None,
    )
    tiles = -(-vocab // chosen.tile)
    rows = RowTable(
        torch.zeros(num_requests, num_drafts + 1, dtype=torch.int64),
        torch.zeros(num_requests, num_drafts, dtype=torch.int64) if has_draft else None,
    )
    outputs = _launcher.Outputs(
        torch.empty(num_requests, num_drafts + 1, dtype=torch.int64), torch.empty(num_requests, dtype=torch.int32)
    )
    call = _launcher._Call(
        chosen,
        _launcher._logits(inputs, rows),
        _launcher._kernel_inputs(inputs),
        allocate_workspace(num_requests, num_drafts, tiles, target.device),
        Sizes(num_requests, num_drafts, vocab, tiles),
        outputs,
        METHODS.index(method),
        has_draft,
        -(-num_requests // chosen.block_requests),
    )
    sizes = call.size_arguments()
    flags = dict(TILE=chosen.tile, BLOCK_R=chosen.block_requests, ROWS_PAD=chosen.rows_pad, TILES_PAD=chosen.tiles_pad)
    keys = [
        key(_verify_kernel._verify_kernel, call.logits, target, target, call.inputs, call.work, *sizes,
            has_draft, chosen.tile, chosen.block_requests, chosen.pass_a_tiles, chosen.stages, False),
        key(_decision._decide_kernel, call.logits, call.inputs, call.work, *sizes, outputs,
            call.method, has_draft, *flags.values()),
        key(_residual_kernel._residual_kernel, call.logits, call.inputs, call.work, *sizes,
            chosen.tile, chosen.block_requests, chosen.rows_pad, 1, chosen.residual_tiles),
        key(_residual_kernel._decide_residual_kernel, call.logits, call.inputs, call.work, *sizes, outputs,
            call.method, *flags.values()),
        key(_small_grid._small_grid_kernel, call.logits, call.inputs, call.work, torch.zeros(4, dtype=torch.int32),
            *sizes, outputs, call.method, has_draft, *flags.values(), 0),
    ]  # fmt: skip
    return " | ".join(keys)


def main(argv):
    method, has_draft, vocab = argv[0], argv[1] == "1", int(argv[2])
    counts = [(int(r), int(k)) for r, k in zip(argv[3::2], argv[4::2], strict=True)]
    first_r, first_k = counts[0]
    chosen = plan(first_r, first_k, vocab, torch.float32, has_draft, method, 132, False, row_table=True)
    chosen = dataclasses.replace(chosen, bulk_copies=False)
    for num_requests, num_drafts in counts:
        print(call_keys(method, has_draft, vocab, num_requests, num_drafts, chosen))


if __name__ == "__main__":
    main(sys.argv[1:])
