"""Prepared data: tokens/s of ``prepare`` (plain text and chat, tokenizing and packing) and of the
prepared loader's ``next_batch`` (packed samples from the memmap), against the training step of a
small model on this CPU — the loader must never be what a step waits for.

    python bench/data_loading.py [--docs 20000] [--preset tiny] [--seq 256] [--tokenizer DIR]

The corpus is generated (words drawn from a fixed list, seeded); without --tokenizer a byte-level
BPE of 8192 entries is trained on it here. Prints the numbers; writes nothing but a temporary dir.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

WORDS = ("the of and to in is that for it as with was on be by this are from or at an which have not "
         "data model training tokens parallel gradient batch step loss layer attention memory device rank "
         "shard pipeline tensor sequence vocabulary checkpoint optimizer schedule learning rate").split()


def write_corpus(d: Path, docs: int, seed: int = 0) -> tuple[Path, Path]:
    rng = random.Random(seed)

    def sentence(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n)) + "."

    text, chat = d / "text.jsonl", d / "chat.jsonl"
    with open(text, "w") as f:
        for _ in range(docs):
            f.write(json.dumps({"text": " ".join(sentence(rng.randint(8, 30)) for _ in range(rng.randint(5, 40)))}) + "\n")
    with open(chat, "w") as f:
        for _ in range(docs // 4):
            turns = [{"role": "system", "content": sentence(10)}]
            for _ in range(rng.randint(1, 4)):
                turns += [{"role": "user", "content": sentence(rng.randint(5, 40))},
                          {"role": "assistant", "content": " ".join(sentence(20) for _ in range(rng.randint(1, 6)))}]
            f.write(json.dumps({"messages": turns}) + "\n")
    return text, chat


def train_tokenizer(d: Path, corpus: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=8192, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((json.loads(line)["text"] for line in open(corpus)), trainer)
    out = d / "tokenizer"
    out.mkdir()
    tok.save(str(out / "tokenizer.json"))
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    (out / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>", "chat_template": template}))
    return out


def bench_prepare(corpus: Path, out: Path, tokenizer: Path, chat: bool) -> tuple[dict, float]:
    from phalanx_runtime.data.options import PrepareOptions
    from phalanx_runtime.data.prepare import prepare

    t0 = time.perf_counter()
    meta, _ = prepare(PrepareOptions(inputs=(str(corpus),), out=str(out), tokenizer=str(tokenizer),
                                     messages_field="messages" if chat else None, eval_fraction=0.01))
    return meta, time.perf_counter() - t0


def bench_loader(path: Path, seq: int, global_batch: int, steps: int = 200) -> float:
    """Seconds per next_batch (one rank holding the whole global batch: the most a rank reads)."""
    from phalanx_runtime.components.data import DataLoader, PreparedSource

    loader = DataLoader(PreparedSource(str(path), seq), global_batch=global_batch, dp_rank=0, dp_size=1, seed=1)
    loader.next_batch()
    t0 = time.perf_counter()
    for _ in range(steps):
        loader.next_batch()
    return (time.perf_counter() - t0) / steps


def bench_training(path: Path, preset: str, vocab: int, seq: int, global_batch: int, steps: int) -> float:
    """Median seconds per training step (1 process, fp32) on the prepared data."""
    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.train import train

    doc = {"metadata": {"name": "bench"}, "spec": {
        "model": {"preset": preset, "overrides": {"vocabSize": vocab}},
        "data": {"source": "prepared", "path": str(path), "seqLen": seq},
        "training": {"steps": steps, "globalBatchSize": global_batch, "microBatchSize": global_batch,
                     "precision": "fp32", "logEvery": 1000}}}
    return statistics.median(train(RuntimeConfig.from_dict(doc)).step_times[1:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--tokenizer", metavar="DIR", help="a model's tokenizer directory (default: one trained here)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        text, chat = write_corpus(d, args.docs)
        tokenizer = Path(args.tokenizer) if args.tokenizer else train_tokenizer(d, text)
        rows = []
        for name, corpus, is_chat in (("text", text, False), ("chat", chat, True)):
            meta, seconds = bench_prepare(corpus, d / f"out-{name}", tokenizer, is_chat)
            tokens = sum(s["tokens"] for s in meta["splits"].values())
            per_batch = bench_loader(d / f"out-{name}", args.seq, args.global_batch)
            rows.append((name, corpus.stat().st_size, tokens, seconds, per_batch))
        step = bench_training(d / "out-text", args.preset, meta["vocab_size"], args.seq, args.global_batch, args.steps)
    batch_tokens = args.global_batch * args.seq
    print(f"training: preset {args.preset}, seq {args.seq}, global batch {args.global_batch}: "
          f"{step * 1e3:.1f} ms/step = {batch_tokens / step:,.0f} tokens/s")
    print("| data | input MB | tokens | prepare tokens/s | next_batch ms | loader tokens/s | loader ÷ training |")
    print("|---|---|---|---|---|---|---|")
    for name, size, tokens, seconds, per_batch in rows:
        print(f"| {name} | {size / 1e6:.1f} | {tokens:,} | {tokens / seconds:,.0f} | {per_batch * 1e3:.3f} | "
              f"{batch_tokens / per_batch:,.0f} | {step / per_batch:,.0f}× |")


if __name__ == "__main__":
    main()
