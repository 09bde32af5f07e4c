"""Shared builders of the engine tests (lockstep, verifying ahead, policies): documents that run side by
side, the numbers of a result that must not depend on how it was run, and the engine options."""

RUN_ONLY = {"wall_time_s", "kernel_wall_time_s", "synthesis_wall_time_s"}


def numbers(result):
    return {k: v for k, v in result.to_dict().items() if k not in RUN_ONLY}


def lockstep_documents(simulation_document, rule, sampling, backend="reference", vocab=256, requests=48):
    common = {"kernel_backend": backend, "bank_rows": 64}
    return [
        simulation_document(
            speculative={
                "method": "eagle3",
                "num_speculative_tokens": 3,
                "rejection_sample_method": rule,
                "draft_sample_method": sampling,
            },
            workload={"concurrency": 16, "num_requests": requests, "temperature": 0.7, "vocab_size": vocab},
            simulation=common,
        ),
        simulation_document(  # another K, another seed, a temperature mix with greedy requests
            seed=5,
            speculative={
                "method": "eagle3",
                "num_speculative_tokens": 5,
                "rejection_sample_method": rule,
                "draft_sample_method": sampling,
            },
            acceptance={"conditional_rates": [0.9, 0.8, 0.6, 0.5, 0.4]},
            workload={
                "concurrency": 4,
                "num_requests": requests // 2,
                "temperature": [{"temperature": 0.0, "weight": 1}, {"temperature": 1.0, "weight": 1}],
                "vocab_size": vocab,
            },
            simulation=common,
        ),
        simulation_document(  # a schedule: K changes with the batch, so steps verify fewer drafts than the engine's K
            seed=2,
            speculative={
                "method": "eagle3",
                "num_speculative_tokens": 4,
                "rejection_sample_method": rule,
                "draft_sample_method": sampling,
                "num_speculative_tokens_per_batch_size": [[1, 6, 4], [7, 256, 1]],
            },
            acceptance={"conditional_rates": [0.8, 0.7, 0.7, 0.6]},
            workload={"concurrency": 8, "num_requests": requests, "temperature": 0.9, "vocab_size": vocab},
            simulation=common,
        ),
        simulation_document(  # speculation off at every batch size: a plain loop beside the others
            speculative={
                "method": "ngram",
                "num_speculative_tokens": 1,
                "num_speculative_tokens_per_batch_size": [[1, 256, 0]],
            },
            workload={"concurrency": 16, "num_requests": requests, "vocab_size": vocab},
            simulation=common,
        ),
    ]


def row_table_documents(simulation_document):
    """Three documents whose synthesizers' banks lie at offsets of either sign from the first met: two
    of ``lockstep_documents`` and one with two acceptance bins."""
    bins = {
        "conditional_rates": [0.5, 0.5],
        "bins": [
            {"min_running": 1, "max_running": 3, "conditional_rates": [0.9, 0.8]},
            {"min_running": 4, "max_running": 64, "conditional_rates": [0.3, 0.2]},
        ],
    }
    documents = lockstep_documents(simulation_document, "block", "probabilistic", vocab=128, requests=12)[:2]
    documents.append(
        simulation_document(
            seed=3,
            speculative={
                "method": "eagle3",
                "num_speculative_tokens": 2,
                "rejection_sample_method": "block",
                "draft_sample_method": "probabilistic",
            },
            acceptance=bins,
            workload={"concurrency": 6, "num_requests": 12, "temperature": 0.7, "vocab_size": 128},
            simulation={"bank_rows": 64},
        )
    )
    return documents


def with_engine(documents, engine):
    """The documents with ``simulation.engine`` set (how the kernels verify: never the numbers)."""
    return [d.model_copy(update={"simulation": d.simulation.model_copy(update={"engine": engine})}) for d in documents]


def on_the_kernels(documents):
    return [
        d.model_copy(update={"simulation": d.simulation.model_copy(update={"kernel_backend": "triton"})})
        for d in documents
    ]


def on_cuda(documents):
    return [d.model_copy(update={"simulation": d.simulation.model_copy(update={"device": "cuda"})}) for d in documents]
