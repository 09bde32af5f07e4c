"""SGLang's adaptive speculative steps (``--speculative-adaptive``), as a document field.

SGLang 0.5.23 (``sglang/srt/speculative/adaptive_spec_params.py``) keeps one ``AdaptiveStepSlot`` per
batch-size key of its ``--speculative-adaptive-config`` JSON file. Each slot picks the drafting depth
(``speculative_num_steps``) from its ``candidate_steps`` by an EMA of the accepted drafts per request,
with warm-up, an update interval and hysteresis. A batch is routed by padding it to the next CUDA-graph
batch size, then taking the closest key at or below the padded size (``_route``, ``_pad_to_cuda_graph_bs``,
``_find_closest_bs``). A key with one candidate pins the depth, which is how a K table reaches SGLang.

The file's top level holds the parameters every slot shares (SGLang merges ``{**cfg, **entry}``); its
integer-string keys are the slots. Defaults are SGLang 0.5.23's (``AdaptiveStepSlot.__init__``).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field, model_validator

from spectune.config._base import FieldPath, RuleViolations, SpectuneModel, check_rules
from spectune.config._speculative import MAX_NUM_SPECULATIVE_TOKENS

__all__ = [
    "SGLANG_ADAPTIVE_VERSION",
    "SGLANG_SLOT_PARAMETERS",
    "SglangAdaptive",
    "SglangAdaptiveSlot",
    "SlotParameters",
    "sglang_speculative_capture_sizes",
]

SGLANG_ADAPTIVE_VERSION = "0.5.23"
# The per-slot parameters SGLang reads with cfg.get(name, default) (AdaptiveStepSlot.__init__).
SGLANG_SLOT_PARAMETERS = (
    "ema_alpha",
    "update_interval",
    "warmup_batches",
    "up_hysteresis",
    "down_hysteresis",
    "ceiling_coeff",
)

# SGLang 0.5.23 DEFAULT_ADAPTIVE_CONFIG (adaptive_spec_params.py:28-53): the steps and hystereses per key.
_DEFAULT_SLOTS: dict[int, tuple[list[int], float, float]] = {
    1: ([1, 3, 5, 7], 0.0, -0.25),
    8: ([0, 1, 3], 0.0, 0.0),
    32: ([0, 1], 0.0, 0.0),
    64: ([0], 0.0, 0.0),
}


def sglang_speculative_capture_sizes(max_batch_size: int) -> list[int]:
    """SGLang's default CUDA-graph batch sizes for speculative decoding, up to ``max_batch_size``.

    ``ServerArgs._generate_cuda_graph_batch_sizes``' speculative branch (finer steps at small batch):
    1..8, then every 2 to 32, every 4 to 64, every 8 to 256, every 16 beyond. The 0.5.23 wheel's
    ``server_args.py`` imports the list from a module outside the reviewed files, so this is the list of
    SGLang's published ``server_args.py`` before that move; pass ``cuda_graph_batch_sizes`` for another.
    """
    sizes = [
        *range(1, 9),
        *range(10, 33, 2),
        *range(40, 65, 4),
        *range(72, 257, 8),
        *range(272, max(max_batch_size, 272) + 1, 16),
    ]
    capped = [size for size in sizes if size <= max_batch_size]
    return capped or [1]


@dataclass(frozen=True)
class SlotParameters:
    """One slot's resolved parameters (its overrides, else the top-level values)."""

    candidate_steps: tuple[int, ...]  # sorted, unique (SGLang sorts the set)
    ema_alpha: float
    update_interval: int
    warmup_batches: int
    up_hysteresis: float
    down_hysteresis: float
    ceiling_coeff: float


class SglangAdaptiveSlot(SpectuneModel):
    """One batch-size key of SGLang's adaptive config: its candidate steps and optional overrides."""

    candidate_steps: list[int] = Field(
        min_length=1,
        description="Drafting depths this slot may choose (speculative_num_steps, tokens; 0 = no drafting), as "
        "SGLang requires: a non-empty list of non-negative integers.",
    )
    ema_alpha: float | None = Field(
        default=None, ge=0.0, le=1.0, description="This slot's EMA weight of the newest batch (fraction)."
    )
    update_interval: int | None = Field(
        default=None, ge=1, le=1_000_000, description="This slot's batches between step decisions (batches)."
    )
    warmup_batches: int | None = Field(
        default=None, ge=0, le=1_000_000, description="This slot's batches before the first decision (batches)."
    )
    up_hysteresis: float | None = Field(
        default=None, ge=-64, le=64, description="This slot's margin added to the step-up threshold (tokens)."
    )
    down_hysteresis: float | None = Field(
        default=None, ge=-64, le=64, description="This slot's margin added to the step-down threshold (tokens)."
    )
    ceiling_coeff: float | None = Field(
        default=None,
        ge=0.0,
        le=64,
        description="This slot's cap on a kept or lowered step: ceil(EMA x coeff) (0: no cap).",
    )

    @model_validator(mode="after")
    def _steps_in_range(self) -> SglangAdaptiveSlot:
        check_rules(
            [
                (
                    ("candidate_steps", i),
                    f"must be an integer in [0, {MAX_NUM_SPECULATIVE_TOKENS}] (0 = no drafting), got {step}",
                )
                for i, step in enumerate(self.candidate_steps)
                if not 0 <= step <= MAX_NUM_SPECULATIVE_TOKENS
            ]
        )
        return self


class SglangAdaptive(SpectuneModel):
    """SGLang's ``--speculative-adaptive`` with its ``--speculative-adaptive-config`` file.

    The initial steps are ``speculative.num_speculative_tokens`` (``--speculative-num-steps``); a slot
    whose candidates lack them starts at its middle candidate, as SGLang does.
    """

    slots: dict[int, SglangAdaptiveSlot] = Field(
        min_length=1,
        description="Batch-size key (requests; SGLang's integer-string keys) -> slot. A batch pads to the next "
        "CUDA-graph batch size, then uses the closest key at or below it (the smallest key below them all).",
    )
    ema_alpha: float = Field(default=0.2, ge=0.0, le=1.0, description="EMA weight of the newest batch (fraction).")
    update_interval: int = Field(
        default=5, ge=1, le=1_000_000, description="Batches between step decisions after warm-up (batches)."
    )
    warmup_batches: int = Field(
        default=10, ge=0, le=1_000_000, description="Batches a slot observes before its first decision (batches)."
    )
    up_hysteresis: float = Field(
        default=0.0, ge=-64, le=64, description="Margin added to the step-up threshold (tokens)."
    )
    down_hysteresis: float = Field(
        default=-0.25, ge=-64, le=64, description="Margin added to the step-down threshold (tokens)."
    )
    ceiling_coeff: float = Field(
        default=0.0, ge=0.0, le=64, description="Cap on a kept or lowered step: ceil(EMA x coeff) (0: no cap)."
    )
    cuda_graph_batch_sizes: list[int] | None = Field(
        default=None,
        description="SGLang's --cuda-graph-bs (requests, increasing); null: SGLang's default speculative capture "
        "list up to the workload's concurrency.",
    )

    @model_validator(mode="after")
    def _keys_and_sizes(self) -> SglangAdaptive:
        problems: list[tuple[FieldPath, str]] = [
            (("slots", key), f"batch-size keys must be integers >= 0 (SGLang reads digit strings), got {key}")
            for key in self.slots
            if key < 0
        ]
        sizes = self.cuda_graph_batch_sizes
        if sizes is not None:
            if not sizes:
                problems.append((("cuda_graph_batch_sizes",), "must list at least one batch size, got []"))
            for i, size in enumerate(sizes):
                if size < 1:
                    problems.append((("cuda_graph_batch_sizes", i), f"must be >= 1 (requests), got {size}"))
                elif i > 0 and size <= sizes[i - 1]:
                    problems.append(
                        (("cuda_graph_batch_sizes", i), f"must be increasing, got {size} after {sizes[i - 1]}")
                    )
        check_rules(problems)
        return self

    # --- SGLang's file --------------------------------------------------------------------------

    @classmethod
    def default(cls) -> SglangAdaptive:
        """SGLang 0.5.23's DEFAULT_ADAPTIVE_CONFIG (what ``--speculative-adaptive`` uses without a file)."""
        return cls(
            slots={
                key: SglangAdaptiveSlot(
                    candidate_steps=steps, up_hysteresis=up, down_hysteresis=down, ceiling_coeff=0.0
                )
                for key, (steps, up, down) in _DEFAULT_SLOTS.items()
            }
        )

    @classmethod
    def from_sglang_json(
        cls, data: Mapping[str, Any], cuda_graph_batch_sizes: Sequence[int] | None = None
    ) -> SglangAdaptive:
        """The model of a ``--speculative-adaptive-config`` file's JSON object.

        Integer-string keys are slots; the other keys are the shared parameters. SGLang ignores keys it
        does not read; spectune refuses them (``RuleViolations`` naming the key), since a typo there
        silently changes nothing in SGLang.
        """
        if not isinstance(data, Mapping):
            raise RuleViolations([((), f"must be a JSON object, got {type(data).__name__}")])
        shared: dict[str, Any] = {}
        slots: dict[int, Any] = {}
        problems: list[tuple[FieldPath, str]] = []
        for key, value in data.items():
            if isinstance(key, str) and key.isdigit():
                slots[int(key)] = value
            elif key in SGLANG_SLOT_PARAMETERS:
                shared[key] = value
            else:
                problems.append(
                    (
                        (str(key),),
                        "unknown key: SGLang reads integer-string batch-size keys and "
                        f"{', '.join(SGLANG_SLOT_PARAMETERS)}",
                    )
                )
        check_rules(problems)
        extra = {} if cuda_graph_batch_sizes is None else {"cuda_graph_batch_sizes": list(cuda_graph_batch_sizes)}
        return cls.model_validate({"slots": slots, **shared, **extra})

    def to_sglang_json(self) -> dict[str, Any]:
        """The JSON object SGLang reads back as this config (the CUDA-graph sizes go to --cuda-graph-bs)."""
        shared: dict[str, Any] = {name: getattr(self, name) for name in SGLANG_SLOT_PARAMETERS}
        slots = {
            str(key): {
                "candidate_steps": list(slot.candidate_steps),
                **{name: getattr(slot, name) for name in SGLANG_SLOT_PARAMETERS if getattr(slot, name) is not None},
            }
            for key, slot in sorted(self.slots.items())
        }
        return {**shared, **slots}

    # --- a spectune K table as singleton candidates --------------------------------------------

    @classmethod
    def pinned(
        cls, table: Sequence[tuple[int, int, int]], cuda_graph_batch_sizes: Sequence[int] | None = None
    ) -> SglangAdaptive:
        """Singleton candidates that serve a K table: one key per row start, pinned to the row's K.

        SGLang routes by the padded batch size, so a batch whose padded size crosses a row start is
        served the next row's K; ``served_k`` says what each batch size gets, to compare with the table.
        """
        if not table:
            raise RuleViolations([(("num_speculative_tokens_per_batch_size",), "needs at least one row, got []")])
        slots = {int(start): SglangAdaptiveSlot(candidate_steps=[int(k)]) for start, _, k in table}
        sizes = None if cuda_graph_batch_sizes is None else list(cuda_graph_batch_sizes)
        return cls(slots=slots, cuda_graph_batch_sizes=sizes)

    def capture_sizes(self, max_batch_size: int) -> list[int]:
        """The CUDA-graph batch sizes SGLang pads to: the given list, else its default up to ``max_batch_size``."""
        if self.cuda_graph_batch_sizes is not None:
            return list(self.cuda_graph_batch_sizes)
        return sglang_speculative_capture_sizes(max_batch_size)

    def route(self, batch_size: int, capture_sizes: Sequence[int]) -> int:
        """The slot key SGLang uses for ``batch_size`` requests: pad to the next capture size (unchanged past
        the last), then the closest key at or below it, else the smallest key."""
        index = bisect.bisect_left(capture_sizes, batch_size)
        padded = capture_sizes[index] if index < len(capture_sizes) else batch_size
        keys = sorted(self.slots)
        return keys[max(0, bisect.bisect_right(keys, padded) - 1)]

    def served_k(self, batch_size: int, capture_sizes: Sequence[int]) -> int | None:
        """The pinned depth ``batch_size`` requests are served, or None when the routed slot adapts."""
        steps = set(self.slots[self.route(batch_size, capture_sizes)].candidate_steps)
        return next(iter(steps)) if len(steps) == 1 else None

    def slot_parameters(self, key: int) -> SlotParameters:
        """The parameters slot ``key`` runs with: its overrides over the top-level values."""
        slot = self.slots[key]
        values = {
            name: getattr(slot, name) if getattr(slot, name) is not None else getattr(self, name)
            for name in SGLANG_SLOT_PARAMETERS
        }
        return SlotParameters(candidate_steps=tuple(sorted(set(slot.candidate_steps))), **values)
