"""`tisa-hf index` and `tisa-hf search` past exact fp16 search: product-quantized storage against a nearest-centroid
reference, an index stored again without the model, the approximate candidate stage over token vectors (its scores
against their definition, its recall on a constructed corpus), convex fusion of BM25 and MaxSim, and the model
check that reads no weights when the files are unchanged."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from test_index_search import TEXTS, corpus_file, index, index_argv, models, search  # noqa: F401

from tisa_hf.embeddings.retrieval.ranking import convex_fusion

pytest.importorskip("sentence_transformers")
pytest.importorskip("faiss")
from sentence_transformers import MultiVectorEncoder  # noqa: E402

from tisa_hf.embeddings.lexical import query_scores  # noqa: E402
from tisa_hf.multivector import index_folder  # noqa: E402
from tisa_hf.multivector.compression import compress  # noqa: E402
from tisa_hf.multivector.index import recompress  # noqa: E402
from tisa_hf.multivector.index_folder import StoredVectors, finished_index  # noqa: E402
from tisa_hf.multivector.search import load_bm25  # noqa: E402
from tisa_hf.multivector.token_candidates import Postings, approximate_scores, document_centroids  # noqa: E402


def hits_of(out, *options):
    path = out.parent / "hits.json"
    queries = ["the sky is blue", " ".join(TEXTS[2].split()[:6]), " ".join(TEXTS[0].split()[50:58])]
    argv = [str(out), "--queries", str(out.parent / "q.txt"), "--out", str(path), *options]
    (out.parent / "q.txt").write_text("".join(f"{query}\n" for query in queries))
    assert search(argv) == 0
    return queries, json.loads(path.read_text())


def test_a_pq_index_stores_each_sub_vector_as_its_nearest_centroid(models, corpus_file, tmp_path):  # noqa: F811
    model, _ = models
    out = tmp_path / "index"
    assert index(index_argv(model, corpus_file, out, "--dtype", "pq8")) == 0
    record = finished_index(str(out))
    assert (record["settings"]["dtype"], record["bytes_per_token"]) == ("pq8", 8)
    codebook = np.load(out / "codebook.npy")
    assert codebook.shape == (8, 256, 4)  # 8 sub-vectors of the tiny model's 32 numbers, 256 centroids each
    codes = np.concatenate([np.load(out / "shards" / f"{part:05d}.npy") for part in range(record["parts"])])
    assert codes.dtype == np.uint8 and codes.shape == (record["vectors"], 8)
    rows = np.concatenate([rows.numpy() for rows in MultiVectorEncoder(model, device="cpu").encode_document(TEXTS)])
    for place in range(8):  # the reference: each sub-vector's nearest centroid by Euclidean distance
        pieces = rows[:, 4 * place : 4 * place + 4]
        distances = ((pieces[:, None, :] - codebook[place][None]) ** 2).sum(-1)
        chosen = codebook[place][codes[:, place]]
        assert np.allclose(((pieces - chosen) ** 2).sum(-1), distances.min(1), atol=1e-5)
    stored = StoredVectors(str(out), record)
    offsets = np.load(out / "offsets.npy")
    decoded = np.concatenate([stored[document] for document in range(len(stored))])
    np.testing.assert_allclose(decoded.reshape(len(decoded), 8, 4), codebook[np.arange(8), codes], atol=1e-7)
    assert len(decoded) == offsets[-1]


def test_recompress_stores_an_index_otherwise_without_its_model(models, corpus_file, tmp_path):  # noqa: F811
    model, _ = models
    assert index(index_argv(model, corpus_file, tmp_path / "fp16")) == 0
    copy = recompress(str(tmp_path / "fp16"), tmp_path / "int8", "int8")
    assert (copy["settings"]["dtype"], copy["bytes_per_token"], copy["parts"]) == ("int8", 36, 3)
    fp16 = StoredVectors(str(tmp_path / "fp16"), finished_index(str(tmp_path / "fp16")))
    int8 = StoredVectors(str(tmp_path / "int8"), copy)
    for document in range(len(fp16)):
        codes, scales = compress(fp16[document], "int8")
        np.testing.assert_array_equal(int8[document], codes.astype(np.float32) * scales[:, None])
    _, found = hits_of(tmp_path / "int8", "--top-k", "2")
    assert found["model"] == model and len(found["results"]) == 3


def test_convex_fusion_ranks_by_normalised_bm25_and_maxsim(models, corpus_file, tmp_path):  # noqa: F811
    model, _ = models
    out = tmp_path / "index"
    assert index(index_argv(model, corpus_file, out)) == 0
    queries, exact = hits_of(out, "--top-k", "7")
    _, fused = hits_of(out, "--top-k", "7", "--fuse", "0.4")
    _, fused_candidates = hits_of(out, "--top-k", "3", "--fuse", "0.4", "--candidates", "4")
    late = np.array(
        [[dict((h["line"] - 1, h["score"]) for h in r["hits"])[d] for d in range(7)] for r in exact["results"]]
    )
    lexical = query_scores(load_bm25(str(out)), queries, "english", 7)
    expected = convex_fusion(lexical, late, 0.4)
    for row, result in zip(expected, fused["results"], strict=True):
        assert [hit["line"] - 1 for hit in result["hits"]] == np.argsort(-row, kind="stable").tolist()
        np.testing.assert_allclose([hit["score"] for hit in result["hits"]], np.sort(row)[::-1], atol=1e-6)
    candidates = np.argsort(-lexical, axis=1, kind="stable")[:, :4]
    kept = np.full_like(late, -np.inf)
    np.put_along_axis(kept, candidates, 1.0, axis=1)
    among = convex_fusion(np.where(kept == 1, lexical, -np.inf), np.where(kept == 1, late, -np.inf), 0.4)
    for row, result in zip(among, fused_candidates["results"], strict=True):
        assert [hit["line"] - 1 for hit in result["hits"]] == np.argsort(-row, kind="stable")[:3].tolist()


def test_search_reads_no_weights_while_the_model_files_are_unchanged(models, corpus_file, tmp_path, monkeypatch):  # noqa: F811
    model, _ = models
    out = tmp_path / "index"
    assert index(index_argv(model, corpus_file, out)) == 0
    fingerprint = index_folder.model_fingerprint
    read = []
    monkeypatch.setattr(index_folder, "model_fingerprint", lambda folder: read.append(folder) or fingerprint(folder))
    hits_of(out)
    assert read == []  # sizes and times as recorded: no file read
    weights = next(iter(sorted(p for p in os.scandir(model) if p.name.endswith(".safetensors"))))
    os.utime(weights.path, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    hits_of(out)
    assert len(read) == 1  # touched: fingerprinted again, and the same


def constructed_corpus(documents: int, tokens: int, dimension: int, seed: int = 0):
    """Random unit token vectors, and for each of 40 queries a target document and 12 query tokens: the target's
    tokens moved by noise of about a third of their length."""
    rng = np.random.default_rng(seed)

    def unit(rows):
        return (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)

    corpus = [unit(rng.standard_normal((tokens, dimension))) for _ in range(documents)]
    targets = rng.choice(documents, 40, replace=False)
    queries = [
        unit(corpus[t][rng.choice(tokens, 12, replace=False)] + 0.35 * unit(rng.standard_normal((12, dimension))))
        for t in targets
    ]
    return corpus, queries, targets


def test_token_candidates_score_as_defined_and_recall_the_constructed_targets():
    from tisa_hf.multivector.token_candidates import nearest_centroids, train_centroids

    corpus, queries, targets = constructed_corpus(documents=300, tokens=60, dimension=32)
    centroids = train_centroids(np.concatenate(corpus), 1024)
    assert centroids.shape == (256, 32)  # 18,000 vectors, 40 a centroid: the power of 2 below 450
    per_document = document_centroids(centroids, corpus)
    postings = Postings.invert(per_document, len(centroids))
    probes = 8
    for query in queries[:5]:  # against the definition, document by document
        similarities, ids = nearest_centroids(centroids, query, probes)
        reference = [
            np.mean([max([s for s, c in zip(sims, found, strict=True) if c in set(owned)], default=0.0)
                     for sims, found in zip(similarities, ids, strict=True)])
            for owned in per_document
        ]  # fmt: skip
        np.testing.assert_allclose(
            approximate_scores(query, centroids, postings, len(corpus), probes), reference, rtol=1e-6
        )
    found = [
        target in np.argsort(-approximate_scores(query, centroids, postings, len(corpus), probes))[:10]
        for query, target in zip(queries, targets, strict=True)
    ]
    assert np.mean(found) >= 0.95  # 10 candidates of 300 documents


def test_search_through_the_token_stage_equals_exact_maxsim_on_its_candidates(models, corpus_file, tmp_path):  # noqa: F811
    model, _ = models
    out = tmp_path / "index"
    assert index(index_argv(model, corpus_file, out, "--token-centroids", "16")) == 0
    record = finished_index(str(out))
    assert np.load(out / "token-candidates" / "centroids.npy").shape == (16, 32)
    assert np.load(out / "token-candidates" / "postings-starts.npy")[-1] == len(
        np.load(out / "token-candidates" / "postings-documents.npy")
    )
    _, exact = hits_of(out, "--top-k", "7")
    _, staged = hits_of(out, "--top-k", "2", "--candidates", "7", "--candidate-stage", "tokens", "--probes", "16")
    for every, result in zip(exact["results"], staged["results"], strict=True):  # every document a candidate
        assert result["hits"] == every["hits"][:2]
    assert record["settings"]["token_centroids"] == 16


def test_the_new_options_are_refused_in_one_line_before_any_model_loads(
    models,  # noqa: F811
    corpus_file,  # noqa: F811
    tmp_path,
    capsys,
    monkeypatch,
):
    model, _ = models
    assert index(index_argv(model, corpus_file, tmp_path / "built")) == 0
    capsys.readouterr()
    monkeypatch.setattr(MultiVectorEncoder, "__init__", lambda *a, **k: (_ for _ in ()).throw(AssertionError("load")))
    cases = {
        ("search", str(tmp_path / "built"), "--query", "x", "--candidates", "10", "--candidate-stage", "tokens"): (
            f"{tmp_path / 'built'} has no token candidate stage; rebuild it with tisa-hf index --token-centroids "
            "4096, or use --candidate-stage bm25."
        ),
        ("index", *index_argv(model, corpus_file, tmp_path / "pq", "--dtype", "pq5")): (
            "--dtype pq5 cuts a vector into 5 sub-vectors, which does not divide the model's 32 numbers; choose an M "
            "that does."
        ),
    }
    for (command, *argv), message in cases.items():
        assert {"search": search, "index": index}[command](argv) == 2
        assert capsys.readouterr().err.splitlines() == [f"tisa-hf {command}: {message}"]
    assert search([str(tmp_path / "built"), "--query", "x", "--fuse", "1.5"]) == 2
    assert "argument --fuse: expected a number from 0 to 1, got '1.5'" in capsys.readouterr().err


def test_too_few_vectors_for_a_codebook_are_refused_in_one_line(models, tmp_path, capsys):  # noqa: F811
    model, _ = models
    small = tmp_path / "small.txt"
    small.write_text("a few words\nand some more\n")
    argv = [model, "--input", str(small), "--out", str(tmp_path / "index"), "--dtype", "pq8"]
    assert index(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("tisa-hf index: --dtype pq8 learns 256 centroids from the first part's token vectors, ")
    assert line.endswith("; give a larger --part-size, or store float16 or int8.")


def test_queries_are_encoded_on_one_thread_and_the_callers_setting_is_restored(models, monkeypatch):  # noqa: F811
    from tisa_hf.multivector.search import encode_queries

    model, _ = models
    encoder = MultiVectorEncoder(model, device="cpu")
    seen = []
    original = MultiVectorEncoder.encode_query
    monkeypatch.setattr(
        MultiVectorEncoder,
        "encode_query",
        lambda self, *a, **k: seen.append(torch.get_num_threads()) or original(self, *a, **k),
    )
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        vectors = encode_queries(encoder, ["the sky is blue", "grass"])
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    for got, reference in zip(vectors, original(encoder, ["the sky is blue", "grass"]), strict=True):
        np.testing.assert_allclose(got, reference.numpy(), rtol=0, atol=1e-6)
