"""`--engine ray`: a corpus's parts embedded by the actors of a Ray cluster, through Ray Data's batch inference.

The parts are the local engine's (--part-size documents, numbered from 0), one Ray Data row and block each, so
that a part is what Ray schedules and retries. `map_batches` runs `PartEmbedder`, a stateful callable class, in a
pool of actors. Each actor receives this process's model once, through Ray's object store, rather than loading it
from its name: the folder need not exist on the other nodes, nor the Hub be reached from them, and a TISA model
pickles like any transformers model, its unpickling importing tisa_hf, which registers TISA's classes in the actor
(a TISA folder loads only where tisa_hf is imported). Each actor moves the model to its own device (the GPU Ray
gave it, if any), and for each part runs the local engine's `work` (`encode.embed_part`) and `keep` (the part's
files, each written under the part's number to a temporary file that then replaces it), returning only the part's
counts. The actors write the parts, so --out must be a folder every node sees.

Resume and failures: this process counts a part in the state file when its row comes back, and the rows come
back in part order (`preserve_order`), so the finished parts stay a prefix, as the local engine keeps them: a rerun
embeds only the parts after it, on either engine. An actor that dies (a killed process, a lost node) is restarted
by Ray Data and its part retried (its actor pools' defaults: max_restarts=-1, max_task_retries=-1); a retried part
replaces the same files, so each part is in the output once and counted once.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from contextlib import closing
from typing import Any

import numpy as np

from .ray_cluster import connected

logger = logging.getLogger(__name__)

# work(model, texts) -> (encoded, tokens read, documents cut, seconds); keep(part, encoded) saves a part
Work = Callable[[Any, list[str]], tuple[Any, int, int, float]]
Keep = Callable[[int, Any], None]


class PartEmbedder:
    """One actor: the model, received once and moved to the actor's device, embedding and saving one part a call."""

    def __init__(self, model: Any, work: Work, keep: Keep) -> None:
        import ray
        import torch

        self.model = ray.get(model).to("cuda" if torch.cuda.is_available() else "cpu")
        self.work, self.keep = work, keep
        self.actor = ray.get_runtime_context().get_actor_id()
        self.threads = torch.get_num_threads()  # Ray sets OMP_NUM_THREADS to the actor's CPUs

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        part = int(batch["part"][0])
        texts = [str(text) for text in batch["texts"][0]]
        encoded, tokens_read, documents_cut, seconds = self.work(self.model, texts)
        self.keep(part, encoded)
        row = {
            "part": part,
            "documents": len(texts),
            "tokens_read": tokens_read,
            "documents_cut": documents_cut,
            "seconds": seconds,
            "actor": self.actor,
            "threads": self.threads,
        }
        return {name: np.array([value]) for name, value in row.items()}


def encode_parts_on_ray(
    model: Any, documents: list[str], args: argparse.Namespace, state: Any, work: Work, keep: Keep
) -> None:
    """Embeds the parts of `documents` that `state` (a `corpus.PartState`) has not done on the cluster of
    --ray-address, each part by `work` and `keep` in an actor, and counts each in `state` as it comes back; each
    run that embeds adds its facts to the record's `ray_runs`: the cluster, the actors' resources, the actors
    that took part and their torch threads, the parts, the seconds to the first part (the actors' start, the
    model's transfer), the run's wall time and the seconds the actors spent embedding."""
    import ray

    starts = range(0, len(documents), args.part_size)
    left = [
        {"part": part, "texts": documents[start : start + args.part_size]}
        for part, start in enumerate(starts)
        if part >= state.record["parts"]
    ]
    if not left:
        logger.info("every part of %s is embedded already", args.out)
        return
    with connected(args.ray_address) as cluster:
        cpus = 1.0 if args.actor_cpus is None else args.actor_cpus
        gpus = float(cluster["resources"]["GPU"] > 0) if args.actor_gpus is None else args.actor_gpus
        run = {**cluster, "actor_cpus": cpus, "actor_gpus": gpus, "actors": 0, "torch_threads": 0, "parts": 0}
        run |= {"first_part_s": 0.0, "wall_time_s": 0.0, "embedding_s": 0.0}
        state.record.setdefault("ray_runs", []).append(run)
        dataset = ray.data.from_items(left, override_num_blocks=len(left)).map_batches(
            PartEmbedder,
            fn_constructor_args=(ray.put(model), work, keep),
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=args.actors, min_size=None if args.actors else 1),
            num_cpus=cpus,
            num_gpus=gpus,
        )
        dataset.context.execution_options.preserve_order = True
        actors: set[str] = set()
        started = last = time.perf_counter()
        with closing(iter(dataset.iter_rows())) as rows:  # an interrupted run stops the execution at once
            for row in rows:
                now = time.perf_counter()
                actors.add(row["actor"])
                run.update(
                    actors=len(actors),
                    torch_threads=max(run["torch_threads"], int(row["threads"])),
                    parts=run["parts"] + 1,
                    first_part_s=run["first_part_s"] or round(now - started, 3),
                    wall_time_s=round(now - started, 3),
                    embedding_s=round(run["embedding_s"] + float(row["seconds"]), 3),
                )
                state.add_part(int(row["documents"]), int(row["tokens_read"]), int(row["documents_cut"]), now - last)
                last = now
                logger.info(
                    "part %d/%d on %d actors: %s",
                    row["part"] + 1,
                    len(starts),
                    len(actors),
                    state.progress(len(documents)),
                )
