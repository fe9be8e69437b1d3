"""`tisa-hf encode --engine ray` and `tisa-hf index --engine ray` on a real one-node Ray cluster (two CPUs, the
loopback interface only: `ray_fixtures.py`): the parts equal sentence-transformers' own `encode_document`, an
interrupted run resumes at its first uncounted part, a finished one embeds nothing again, an actor killed in the
middle of a part leaves the job finished with each part saved once; and bad input is one line before any model
loads."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import string
import subprocess
import sys

import numpy as np
import pytest
from embedding_fixtures import tiny_tokenizer, write_tiny_encoder
from ray_fixtures import INTERRUPT, die_on, ray_cluster, saved_parts

from tests.fixtures import network_namespaces_available
from tisa_hf.commands import cli

pytest.importorskip("sentence_transformers")

encode, index = cli.entry("encode"), cli.entry("index")
_letters = random.Random(0)
TEXTS = [
    " ".join("".join(_letters.choices(string.ascii_lowercase, k=_letters.randint(2, 6))) for _ in range(words))
    for words in (60, 3, 25, 40, 7, 33, 12, 50, 4, 18, 29)
]
READS = 48  # tokens the single-vector model reads: some of the documents are longer
PARTS = 4  # of 3 documents (the last of 2)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    """A TISA replace-mode sentence-transformers folder of the tiny BERT (reading 48 tokens), and a multi-vector
    one."""
    from transformers import AutoModel

    import tisa_hf
    from tisa_hf.common.sentence_models import save_sentence_transformer, to_tisa_sentence_transformer
    from tisa_hf.multivector import save_multi_vector_encoder

    root = tmp_path_factory.mktemp("ray-models")
    plain = write_tiny_encoder(root / "plain", positions=32)
    tisa = {"num_kernels": 2, "mode": "replace", "init": "random"}
    single = to_tisa_sentence_transformer(str(plain), tisa, max_seq_length=READS, device="cpu")
    AutoModel.from_pretrained(plain, tisa=tisa_hf.TisaConfig(**tisa)).save_pretrained(root / "tisa")
    tiny_tokenizer().save_pretrained(root / "tisa")
    return {
        "single": str(save_sentence_transformer(single, root / "single")),
        "multi": str(save_multi_vector_encoder(root / "tisa", root / "multi")),
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pytest.importorskip("ray.data")
    if not network_namespaces_available():
        if os.environ.get("CI"):
            pytest.fail("CI must be able to make network namespaces (unshare --net) for the Ray cluster")
        pytest.skip("no network namespace for the Ray cluster (unshare --net needs root or CAP_SYS_ADMIN)")
    with ray_cluster(tmp_path_factory.mktemp("ray-hooks")) as started:
        yield started


@pytest.fixture()
def hooks(cluster):
    """The cluster's hooks folder, emptied for the test."""
    for file in cluster.hooks.iterdir():
        file.unlink()
    return cluster.hooks


@pytest.fixture()
def corpus_file(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": i, "body": text}) + "\n" for i, text in enumerate(TEXTS)))
    return path


def ray_argv(command: str, model: str, corpus_path, out, cluster, *extra: str) -> list[str]:
    return [
        command, model, "--input", str(corpus_path), "--text-field", "body", "--out", str(out), "--part-size", "3",
        "--engine", "ray", "--ray-address", cluster.address, "--actors", "2", *extra,
    ]  # fmt: skip


def test_an_interrupted_run_resumes_to_encode_documents_embeddings_and_a_finished_one_embeds_nothing(
    cluster, hooks, models, corpus_file, tmp_path
):
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "out"
    argv = ray_argv("encode", models["single"], corpus_file, out, cluster, "--batch-size", "1")
    (hooks / INTERRUPT).touch()
    interrupted = cluster.run(*argv)
    said = [line for line in interrupted.stderr.splitlines() if line.startswith("tisa-hf encode: interrupted")]
    assert interrupted.returncode == 130, interrupted.stderr[-3000:]
    assert len(said) == 1 and said[0].startswith("tisa-hf encode: interrupted; kept 1 part ("), said
    assert said[0].endswith(f" documents) in {out}; the same command resumes from there."), said
    assert json.loads((out / "encode.json").read_text())["parts"] == 1
    assert not (out / "embeddings.npy").exists()
    (hooks / INTERRUPT).unlink()

    resumed = cluster.run(*argv)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert sorted(saved_parts(hooks)[-1]) == list(range(1, PARTS))  # the parts the first run had not counted, once
    expected = SentenceTransformer(models["single"], device="cpu").encode_document(TEXTS, batch_size=1)
    np.testing.assert_allclose(np.load(out / "embeddings.npy"), expected, rtol=0, atol=1e-6)
    record = json.loads((out / "encode.json").read_text())
    lengths = [len(ids) for ids in tiny_tokenizer()(TEXTS)["input_ids"]]
    assert (record["parts"], record["documents"], record["reads_tokens"]) == (PARTS, len(TEXTS), READS)
    assert record["tokens_read"] == sum(min(n, READS) for n in lengths)
    assert record["documents_cut"] == sum(n > READS for n in lengths) > 0
    assert [run["parts"] for run in record["ray_runs"]] == [1, PARTS - 1]
    last_run = record["ray_runs"][-1]
    assert (last_run["nodes"], last_run["resources"], last_run["actor_cpus"]) == (1, {"CPU": 2, "GPU": 0}, 1)
    assert 1 <= last_run["actors"] <= 2  # the second of --actors 2 may start after the first has done every part
    assert record["throughput"]["documents_per_s"] == round(len(TEXTS) / record["wall_time_s"], 3)

    saved = {file.name: file.stat().st_mtime_ns for file in (out / "parts").iterdir()}
    assert sorted(saved) == [f"{part:05d}.npy" for part in range(PARTS)]
    import ray

    address = argv.index("--ray-address")
    assert encode(argv[1:address] + argv[address + 2 :]) == 0  # here, where a cluster would start on this machine
    assert not ray.is_initialized()  # none did: nothing was left to embed
    assert {file.name: file.stat().st_mtime_ns for file in (out / "parts").iterdir()} == saved
    assert len(json.loads((out / "encode.json").read_text())["ray_runs"]) == 2


def test_an_actor_killed_in_the_middle_of_a_part_leaves_the_index_whole_with_each_part_saved_once(
    cluster, hooks, models, corpus_file, tmp_path
):
    from sentence_transformers import MultiVectorEncoder

    from tisa_hf.multivector.index_folder import StoredVectors, finished_index

    out = tmp_path / "index"
    die_on(hooks, 1).touch()
    finished = cluster.run(*ray_argv("index", models["multi"], corpus_file, out, cluster))
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert not die_on(hooks, 1).exists()  # an actor died between embedding part 1 and saving it
    assert sorted(part for run in saved_parts(hooks) for part in run) == list(range(PARTS))  # each saved once
    assert sorted(file.name for file in (out / "shards").iterdir()) == sorted(
        f"{part:05d}{suffix}.npy" for part in range(PARTS) for suffix in ("", "-counts")
    )  # and no temporary file left
    record = finished_index(str(out))
    assert (record["parts"], record["documents"], record["ray_runs"][0]["parts"]) == (PARTS, len(TEXTS), PARTS)
    expected = MultiVectorEncoder(models["multi"], device="cpu").encode_document(TEXTS, batch_size=1)
    stored = StoredVectors(str(out), record)
    assert [len(vectors) for vectors in stored] == [len(vectors) for vectors in expected]
    for vectors, reference in zip(stored, expected, strict=True):
        np.testing.assert_allclose(vectors, np.asarray(reference), rtol=0, atol=1e-3)  # stored as float16


def refused_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--actors", "2"],
            "--actors is an option of --engine ray; add --engine ray, or leave --actors out.",
        ),
        (
            ["--engine", "ray", "--devices", "cpu", "cpu"],
            "--devices places sentence-transformers' processes on this machine; with --engine ray, --actors and "
            "--actor-gpus place the model's copies on the cluster.",
        ),
        (
            ["--engine", "ray", "--ray-address", "head-node"],
            "--ray-address head-node: give HOST:PORT of the cluster's head, ray://HOST[:PORT] (Ray Client) or auto.",
        ),
    ],
)
def test_ray_options_that_do_not_fit_are_one_line_before_anything_loads(corpus_file, tmp_path, capsys, extra, message):
    pytest.importorskip("ray.data")
    argv = ["no-such-model", "--input", str(corpus_file), "--text-field", "body", "--out", str(tmp_path / "out")]
    assert encode([*argv, *extra]) == 2
    assert capsys.readouterr().err == f"tisa-hf encode: {message}\n"


def test_an_address_where_no_cluster_answers_is_one_line(corpus_file, tmp_path, capsys):
    pytest.importorskip("ray.data")
    address = f"127.0.0.1:{refused_port()}"
    argv = ["no-such-model", "--input", str(corpus_file), "--out", str(tmp_path / "out"), "--engine", "ray"]
    assert encode([*argv, "--ray-address", address]) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf encode: --ray-address {address}: nothing answers at {address} (Connection refused); start the "
        "cluster's head there (ray start --head), or leave --ray-address out to start a cluster on this machine.\n"
    )


def test_a_corpus_missing_its_field_is_one_line_before_a_cluster_starts(corpus_file, tmp_path, capsys):
    pytest.importorskip("ray.data")
    argv = ["no-such-model", "--input", str(corpus_file), "--out", str(tmp_path / "out"), "--engine", "ray"]
    assert encode(argv) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf encode: {corpus_file}:1: no text under 'text'; name the field with --text-field.\n"
    )


@pytest.mark.parametrize("command", [encode, index])
def test_the_ray_engine_without_ray_is_refused_in_one_line_naming_the_extra(
    command, corpus_file, tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails, as where it is not installed
    monkeypatch.setitem(sys.modules, "ray.data", None)
    argv = ["no-such-model", "--input", str(corpus_file), "--out", str(tmp_path / "out"), "--engine", "ray"]
    assert command(argv) == 2
    name = "encode" if command is encode else "index"
    assert capsys.readouterr().err == (
        f'tisa-hf {name}: --engine ray needs Ray Data, which is not installed: pip install "tisa-hf[ray]".\n'
    )


LOOPBACK = ("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")
LISTENERS = """
import subprocess
from tisa_hf.embeddings.ray_cluster import connected
with connected(None) as cluster:
    print(subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout)
"""


def test_a_cluster_started_for_the_run_listens_on_the_loopback_address_only():
    """The default of --engine ray (no --ray-address) on the host's own network: every socket the cluster's
    processes listen on is a loopback one, while they run."""
    pytest.importorskip("ray.data")
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) lists the listening sockets")
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    done = subprocess.run(
        [sys.executable, "-c", LISTENERS], capture_output=True, text=True, timeout=180, env=env, check=True
    )
    ray_sockets = [
        line.split()[3]
        for line in done.stdout.splitlines()
        if any(name in line for name in ('"raylet"', '"gcs_server"', '"ray::', '"python'))
    ]
    assert len(ray_sockets) >= 3, done.stdout  # the GCS, the raylet and the driver at least
    assert [address for address in ray_sockets if not address.startswith(LOOPBACK)] == []
