"""Benchmark: faiss search indexes against exact brute-force numpy search, in the same run.

Builds a synthetic corpus of ``--docs`` documents (:func:`cogym.envs.search.synthetic_corpus`) and
embeds it once with the default embedder (hashed character n-gram TF-IDF, 512 dimensions). Then for
each index kind of :func:`cogym.envs.search.make_index` (``flat``: exact; ``hnsw``: the default above
20,000 documents; ``ivf``), its build time, and for ``--queries`` of the corpus' questions, one query
at a time, timing only the search (every side gets the same embedded query):

* the index's top 5 (``index.search``), and
* brute force: every document's inner product with the query (``vecs @ q``, numpy) and the top 5 by
  ``argpartition``, the exact answer,

each one's median and p99 latency, the speedup over brute force, recall@5 against brute force (the
share of the exact top 5 the index also returns) and how often the question's own document is in
the top 5.

    python benchmarks/search.py [--docs 100000] [--queries 1000] [--ef-search 64] [--nprobe 16]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1_000)
    ap.add_argument("--kinds", default="flat,hnsw,ivf")
    ap.add_argument("--ef-search", type=int, default=64, help="hnsw: candidates a query (default 64)")
    ap.add_argument("--nprobe", type=int, default=16, help="ivf: lists searched a query (default 16)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from cogym.envs.search import NgramEmbedder, _doc_text, make_index, synthetic_corpus

    t0 = time.perf_counter()
    docs = synthetic_corpus(args.docs, seed=args.seed)
    gen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    embedder = NgramEmbedder()
    texts = [_doc_text(d) for d in docs]
    embedder.fit(texts)
    vecs = embedder.embed(texts)
    embed_s = time.perf_counter() - t0
    picks = np.random.default_rng(args.seed + 1).choice(len(docs), size=min(args.queries, len(docs)), replace=False)
    queries = embedder.embed([docs[i]["question"] for i in picks])
    k = 5
    brute_t, exact = [], []
    for q in queries:
        t = time.perf_counter()
        top = np.argpartition(-(vecs @ q), k)[:k]
        brute_t.append(time.perf_counter() - t)
        exact.append(set(int(i) for i in top))
    own_brute = np.mean([int(d) in e for d, e in zip(picks, exact)])
    rows = [("numpy brute force", None, brute_t, 1.0, own_brute)]
    for kind in args.kinds.split(","):
        t0 = time.perf_counter()
        index = make_index(vecs, kind, nprobe=args.nprobe, ef_search=args.ef_search, seed=args.seed)
        build_s = time.perf_counter() - t0
        times, recall, own = [], [], []
        for q, doc_no, ex in zip(queries, picks, exact):
            t = time.perf_counter()
            _, ids = index.search(q[None, :], k)
            times.append(time.perf_counter() - t)
            got = set(int(i) for i in ids[0] if i >= 0)
            recall.append(len(got & ex) / k)
            own.append(int(doc_no) in got)
        rows.append((f"faiss {kind}", build_s, times, float(np.mean(recall)), float(np.mean(own))))

    print(f"corpus: {len(docs)} synthetic documents (made in {gen_s:.1f} s), embedded (fit + embed, "
          f"{embedder.dim} dims) in {embed_s:.1f} s; {len(picks)} queries, one at a time, top {k}")
    print(f"{'search':<19}{'build s':>8}{'median ms':>10}{'p99 ms':>8}{'speedup':>8}{'recall@5':>9}{'own doc':>8}")
    base = float(np.median(brute_t))
    for name, build_s, times, recall, own in rows:
        build = f"{build_s:.1f}" if build_s is not None else "-"
        med = float(np.median(times))
        print(f"{name:<19}{build:>8}{1000 * med:>10.3f}{1000 * float(np.quantile(times, 0.99)):>8.3f}"
              f"{base / med:>7.1f}x{recall:>9.3f}{own:>8.3f}")


if __name__ == "__main__":
    main()
