"""Compile every kernel variant for sm_90 without a GPU (run as a script, without TRITON_INTERPRET).

Catches code that Triton's interpreter runs but its compiler rejects (break/continue, return in a
loop, interpreter-only builtins). Prints one line per variant; exits 1 on the first failure. Also
compiles pass A as launched (under its register caps). With ``--resources`` each line ends with
ptxas's registers, spills and stack, the dependent waves of loads after the one-hot small-grid
kernel's ticket (``load_waves_after_ticket``) and the number of tile-wide index tensors Triton
converted between layouts (``index_conversions``).

``--ptx DIR`` writes each variant's PTX to DIR, normalised so that a refactor which should not
change the generated code can be checked with ``diff -r`` against a run before it: debug lines
and labels dropped, and parameters renamed by first use (regrouping arguments renumbers them).

    python tests/kernels/compile_check.py --ptx /tmp/before   # on the old tree
    python tests/kernels/compile_check.py --ptx /tmp/after && diff -r /tmp/before /tmp/after
"""

import os
import re
import subprocess
import sys
import tempfile

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("compile_check.py must run without TRITON_INTERPRET=1")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from spectune.kernels import _decision, _plan, _residual_kernel, _small_grid, _verify_kernel  # noqa: E402
from spectune.kernels._arguments import Inputs, Logits, Outputs, Sizes, VocabSizes, Workspace  # noqa: E402
from spectune.kernels._contract import DEFAULT_TILE  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
# The kernels' named-tuple arguments and their fields' types (others: *fp32 pointers).
GROUPS = {"logits": Logits, "inputs": Inputs, "work": Workspace, "vocab_sizes": VocabSizes, "outputs": Outputs}
# Plain runtime sizes (``do_not_specialize``): neither specialised on 1 nor known divisible by 16.
RUNTIME_SIZES = ("num_requests", "num_drafts")
FIELD_TYPES = {
    "target": "*fp32",
    "draft": "*bf16",
    "draft_tokens": "*i64",
    "seed": "*i64",
    "draft_first_max": "*i32",
    "plan": "*i32",
    "tile_token": "*i32",
    "excluded_token": "*i32",
    "residual_token": "*i32",
    "tokens": "*i64",
    "num_tokens": "*i32",
    "counter_ptr": "*i32",
    "target_rows": "*i64",
    "draft_rows": "*i64",
}


def field_type(name, logits):
    if name in ("target", "draft") and logits:
        return logits
    if "stride" in name:
        return "i64"
    if name in Sizes._fields:
        return "i32"
    return FIELD_TYPES.get(name, "*fp32")


def signature(fn, constexprs, logits=None, row_table=0):
    """Argument types; ``logits`` ("*fp32", "*bf16") sets both logit tensors' type if given, and
    divisibility by 16 for pointers, strides and the vocabulary (as the launcher sees them for
    V = 128256), keyed by argument path; ``row_table`` the Logits field's constexpr (1: rows through
    the row tables). Returns the signature, the attributes and the constexprs inside groups."""
    sig, aligned, inside = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in GROUPS:
            group = GROUPS[name]
            sig[name] = group(
                *("constexpr" if field == "row_table" else field_type(field, logits) for field in group._fields)
            )
            for j, field in enumerate(group._fields):
                if field == "row_table":
                    inside[(i, j)] = row_table
                    continue
                if sig[name][j].startswith("*") or "stride" in field or field == "vocab":
                    aligned[(i, j)] = [["tt.divisibility", 16]]
        elif name in RUNTIME_SIZES:
            sig[name] = "i32"
        elif name.endswith("_desc"):  # bulk-copy descriptors, or unused pointers without them
            dtype = field_type("target" if name == "target_desc" else "draft", logits)
            sig[name] = f"tensordesc<{dtype[1:]}[1, 1, {constexprs['TILE']}]>" if constexprs.get("USE_TMA") else dtype
        else:
            sig[name] = field_type(name, logits)
            aligned[(i,)] = [["tt.divisibility", 16]]
    return sig, aligned, inside


def compile_variant(fn, options=None, logits=None, row_table=0, **constexprs):
    sig, aligned, inside = signature(fn, constexprs, logits, row_table)
    source = ASTSource(fn=fn, signature=sig, constexprs={**constexprs, **inside}, attrs=aligned)
    return triton.compile(source, target=TARGET, options=options or {"num_warps": 8})


def parameter_names(fn, constexprs) -> list[str]:
    """The kernel's PTX parameters in order, named by argument (``work.tile_max``): a named tuple
    is its fields, a bulk-copy descriptor its map, three sizes and three strides; Triton appends
    two scratch pointers."""
    names = []
    for name in fn.arg_names:
        if name in constexprs:
            continue
        if name in GROUPS:
            names += [f"{name}.{field}" for field in GROUPS[name]._fields if field != "row_table"]  # (a constexpr)
        elif name.endswith("_desc") and constexprs.get("USE_TMA"):
            names += [name] + [f"{name}.shape{i}" for i in range(3)] + [f"{name}.stride{i}" for i in range(3)]
        else:
            names.append(name)
    return names + ["global_scratch", "profile_scratch"]


def normalised_ptx(ptx: str, names: list[str]) -> str:
    """The PTX without debug lines, labels, comments, register declarations or parameter loads: a value
    loaded from a parameter is written as the parameter's name (``names``, in order), and the
    other registers are renumbered by first appearance. Regrouping a kernel's arguments moves its
    parameter loads and renumbers its registers; this leaves only real differences."""
    lines, loaded = [], {}
    for line in ptx.splitlines():
        stripped = line.strip()
        if stripped.startswith(".section") and ".debug" in stripped:
            break
        if stripped.startswith((".loc", ".file", "$L__tmp", "$L__func", ".reg", ".param")):
            continue
        line = re.sub(r"\s*//.*$", "", line)  # comments name LLVM blocks by a running count
        line = re.sub(r"\w+_param_(\d+)", lambda m: "%" + names[int(m.group(1))], line)
        load = re.match(r"\s*ld\.param\.\w+\s+(%\w+), \[(%[\w.]+)\];", line)
        if load:
            loaded[load.group(1)] = load.group(2)
            continue
        lines.append(line)
    text = re.sub(r"%\w+\b", lambda m: loaded.get(m.group(0), m.group(0)), "\n".join(lines))
    numbers: dict[str, str] = {}
    counts: dict[str, int] = {}

    def renumber(match: re.Match) -> str:
        if match.group(0) not in numbers:
            prefix = match.group(1)
            counts[prefix] = counts.get(prefix, 0) + 1
            numbers[match.group(0)] = f"%{prefix}#{counts[prefix]}"
        return numbers[match.group(0)]

    return re.sub(r"%(r|rd|p|f|fd|rs|h|hh|b)(\d+)\b", renumber, text) + "\n"


def resources(kernel, one_hot_small_grid: bool = False) -> str:
    """ptxas's register and spill report for the compiled PTX, and what the SASS says (no GPU needed);
    ``load_waves_after_ticket`` for the one-hot small-grid kernel, else "-"."""
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.TemporaryDirectory() as directory:
        ptx, cubin = os.path.join(directory, "kernel.ptx"), os.path.join(directory, "kernel.cubin")
        with open(ptx, "w") as handle:
            handle.write(kernel.asm["ptx"])
        report = subprocess.run(
            [os.path.join(tools, "ptxas"), "--gpu-name", "sm_90a", "-v", ptx, "-o", cubin],
            capture_output=True,
            text=True,
        ).stderr
        sass = subprocess.run([os.path.join(tools, "cuobjdump"), "-sass", cubin], capture_output=True, text=True).stdout
    registers = re.search(r"Used (\d+) registers", report)
    spills = re.search(r"(\d+) bytes spill stores", report)
    stack = re.search(r"(\d+) bytes stack frame", report)
    waves = load_waves_after_ticket(sass) if one_hot_small_grid else "-"
    return (
        f"registers={registers.group(1) if registers else '?'} load_waves_after_ticket={waves} "
        f"spill_stores={spills.group(1) if spills else '?'} stack={stack.group(1) if stack else '?'} "
        f"index_conversions={index_conversions(kernel)}"
    )


def load_waves_after_ticket(sass: str) -> str:
    """Dependent waves of global loads in the SASS of the one-hot small-grid kernel after its ticket
    (its one ``ATOMG.E.ADD``; with draft logits the barrier's atomics are there too).

    A wave ends where a cross-thread step (a shuffle, a warp reduction, a block barrier) comes after
    a load: a load after that step cannot be in flight with the ones before it. The one-hot decider
    needs one wave (it once took four: draft tokens, statistics, the draft's logit, the draws).
    """
    instructions = [line.split(";")[0] for line in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", line)]
    tickets = [i for i, text in enumerate(instructions) if "ATOMG.E.ADD" in text]
    if len(tickets) != 1:
        return "?"
    waves, step_since_load, loaded = 0, False, False
    for text in instructions[tickets[0] + 1 :]:
        if re.search(r"\bLDG\.", text):
            if not loaded or step_since_load:
                waves += 1
            loaded, step_since_load = True, False
        elif loaded and re.search(r"\b(SHFL|REDUX|BAR\.SYNC)", text):
            step_since_load = True
    return str(waves)


def index_conversions(kernel) -> int:
    """Layout conversions of integer or boolean tensors of a tile's width (>= 1024) in the TTGIR.

    Token ids, the race's hash and masks are made from aranges and per-request scalars, so they can
    always be laid out like the logits they meet; a conversion means Triton computed them in some
    other layout (a decision once hashed every token on 4-8 warps at once, then converted).
    """
    pattern = re.compile(r"ttg\.convert_layout .*-> tensor<\d+x(\d+)x(?:i1|i32|i64),")
    return sum(int(match.group(1)) >= 1024 for match in pattern.finditer(kernel.asm["ttgir"]))


def variants():
    padding = dict(ROWS_PAD=8, TILES_PAD=64)
    for has_draft in (False, True):
        for tma, per_program, stages in ((False, 1, 1), (True, 8, 3)):
            yield (
                _verify_kernel._verify_kernel,
                None,
                dict(
                    HAS_DRAFT=has_draft,
                    USE_TMA=tma,
                    TILES_PER_PROGRAM=per_program,
                    STAGES=stages,
                    TILE=DEFAULT_TILE,
                    BLOCK_R=1,
                ),
            )
    for method in (0, 1, 2):
        for has_draft in (False, True):
            yield (
                _decision._decide_kernel,
                None,
                dict(METHOD=method, HAS_DRAFT=has_draft, TILE=DEFAULT_TILE, BLOCK_R=1, **padding),
            )
        yield (
            _residual_kernel._residual_kernel,
            None,
            dict(SLOTS=7 if method == 1 else 1, TILE=DEFAULT_TILE, BLOCK_R=1, ROWS_PAD=8, TILES_PER_PROGRAM=1),
        )
        yield (
            _residual_kernel._decide_residual_kernel,
            None,
            dict(METHOD=method, TILE=DEFAULT_TILE, BLOCK_R=1, **padding),
        )
        # The small-grid kernel as launched (the register cap that keeps two programs an SM);
        # with draft logits the barrier kernel and the two launches around it.
        for has_draft, stage in ((False, 0), (True, 0), (True, 1), (True, 2)):
            options = {
                "num_warps": 8,
                "maxnreg": _plan.SMALL_GRID_REGISTERS,
                "launch_cooperative_grid": has_draft and stage == 0,
            }
            yield (
                _small_grid._small_grid_kernel,
                options,
                dict(
                    METHOD=method,
                    HAS_DRAFT=has_draft,
                    STAGE=stage,
                    TILE=DEFAULT_TILE,
                    BLOCK_R=1,
                    **padding,
                ),
            )


def launched_pass_a():
    """Pass A as the launcher compiles it for large grids at V = 128256: (logits, options, constexprs).

    Bulk copies (fp32, R=256-sized grids) and plain loads under the plan's register caps, which
    may spill a few bytes (the caps measured faster anyway; see ``_plan``); the simulator's fp32
    rows through row tables (plain loads). Yields (logits, options, constexprs, row_table).
    """
    for has_draft in (False, True):
        draft = dict(HAS_DRAFT=has_draft, TILE=DEFAULT_TILE, BLOCK_R=1)
        yield "*fp32", {"num_warps": 4}, dict(USE_TMA=True, TILES_PER_PROGRAM=16, STAGES=_plan.BULK_STAGES, **draft), 0
        for logits, cap in (("*fp32", _plan.FP32_REGISTERS), ("*bf16", _plan.SIXTEEN_BIT_REGISTERS)):
            yield (
                logits,
                {"num_warps": 4, "maxnreg": cap},
                dict(USE_TMA=False, TILES_PER_PROGRAM=1, STAGES=1, **draft),
                0,
            )
        plain = dict(USE_TMA=False, TILES_PER_PROGRAM=1, STAGES=1, **draft)
        cap = _plan.ROW_TABLE_REGISTERS if has_draft else _plan.FP32_REGISTERS
        yield "*fp32", {"num_warps": 4, "maxnreg": cap}, plain, 1


def variant_name(tag, fn, logits, options, constexprs) -> str:
    """A file name for a variant's PTX: what distinguishes it, without the sizes every variant shares."""
    shared = ("TILE", "BLOCK_R", "ROWS_PAD", "TILES_PAD")
    key = "-".join(f"{name}{value}" for name, value in sorted(constexprs.items()) if name not in shared)
    option = "-".join(f"{name}{value}" for name, value in sorted((options or {}).items()))
    return f"{tag}-{fn.__name__}-{(logits or '').strip('*')}-{option}-{key}"


def main() -> int:
    show_resources = "--resources" in sys.argv
    ptx_directory = sys.argv[sys.argv.index("--ptx") + 1] if "--ptx" in sys.argv else None
    if ptx_directory:
        os.makedirs(ptx_directory, exist_ok=True)
    jobs = [(fn, options, None, constexprs, 0, "ok") for fn, options, constexprs in variants()]
    jobs += [
        (_verify_kernel._verify_kernel, options, logits, constexprs, row_table, "launched")
        for logits, options, constexprs, row_table in launched_pass_a()
    ]
    for fn, options, logits, constexprs, row_table, tag in jobs:
        try:
            kernel = compile_variant(fn, options, logits, row_table, **constexprs)
        except Exception as error:  # report which variant broke, then fail
            print(f"FAIL {fn.__name__} {constexprs}: {type(error).__name__}: {error}")
            return 1
        if ptx_directory:
            name = variant_name(tag, fn, logits, options, constexprs) + ("-row_table" if row_table else "")
            with open(os.path.join(ptx_directory, name + ".ptx"), "w") as handle:
                handle.write(normalised_ptx(kernel.asm["ptx"], parameter_names(fn, constexprs)))
        one_hot = fn.__name__ == "_small_grid_kernel" and not constexprs["HAS_DRAFT"]
        extra = resources(kernel, one_hot) if show_resources else ""
        table = " row_table" if row_table else ""
        print(f"{tag} {fn.__name__} {logits or ''}{table} {options or ''} {constexprs} {extra}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
