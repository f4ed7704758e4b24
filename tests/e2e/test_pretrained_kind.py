"""A pretrained Hugging Face model fine-tuned on real pods, the path of docs/pretrained.md: load →
prepare → train → eval → export, on 2 nodes × 1 process (CPU, gloo).

The test makes a tiny Llama directory with transformers (``LlamaConfig`` + ``save_pretrained``,
sharded safetensors with their index, a word-level tokenizer trained with ``tokenizers`` and a chat
template) and chat JSONL files on the shared volume ``phalanx-shared`` (the kind nodes mount it;
this machine sees it at ``PHALANX_E2E_SHARED_DIR``). One TrainingJob reads them from its checkpoint
volume: ``model.pretrained``, ``data.prepare`` (source prepared, an eval file), ``training.eval``
and ``checkpoint.exportHuggingFace``. Then: the status carries eval_loss (and `kubectl get tj`
shows it), the checkpoint has ``final/hf`` with config.json, safetensors shards and their index,
transformers loads it here, and its loss on the prepared eval split is the job's final eval_loss.

Every record of the eval file is the same conversation of exactly seqLen tokens: every sample of
the eval split is then the same, so the loss transformers computes over the split is the job's
eval loss whichever samples and how many batches the runtime's evaluation took.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_kind_e2e import follow

pytestmark = [pytest.mark.timeout(900)]

INPUTS = "e2e-pretrained-inputs"  # on the shared volume, beside the jobs' checkpoint dirs
MOUNT = "/checkpoints"  # where the job mounts that volume (checkpoint.mountPath)
SEQ_LEN = 32
STEPS = 20
SPECIAL_TOKENS = ["<unk>", "<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = ("{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} </s> {% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
# 32 tokens with the template (4 markers, 5 + 23 words): a record fills one sample exactly
EVAL_CONVERSATION = [{"role": "user", "content": "what is two plus three"},
                     {"role": "assistant", "content": " ".join((["two", "plus", "three", "is", "five"] * 5)[:23])}]
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def conversations() -> list[list[dict[str, str]]]:
    """Sums of two numbers below five, in words: a small language the model can learn."""
    return [[{"role": "user", "content": f"what is {NUMBERS[a]} plus {NUMBERS[b]}"},
             {"role": "assistant", "content": f"{NUMBERS[a]} plus {NUMBERS[b]} is {NUMBERS[a + b]}"}]
            for a in range(5) for b in range(5)]


def write_tokenizer(out: Path, texts: list[str]) -> int:
    """A word-level tokenizer of ``texts`` with the chat template; returns its vocabulary size."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    config_file = out / "tokenizer_config.json"  # the template in tokenizer_config.json too, where readers look first
    config = json.loads(config_file.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    config_file.write_text(json.dumps(config, indent=2))
    return len(fast)


def write_llama(out: Path, vocab_size: int) -> None:
    """A tiny Llama (GQA, separate embeddings), seeded, in several safetensors shards with an index."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=False, bos_token_id=2, eos_token_id=3, pad_token_id=1)
    LlamaForCausalLM(config).save_pretrained(out, max_shard_size="100KB")
    assert (out / "model.safetensors.index.json").is_file(), "the model should come in shards"


@pytest.fixture
def inputs(shared_dir) -> Iterator[Path]:
    """The model and the chat files on the shared volume, writable by the pods (uid 1000) for the
    prepared directory."""
    if shared_dir is None:
        pytest.skip("needs PHALANX_E2E_SHARED_DIR: the test writes the model where the kind nodes see it")
    pytest.importorskip("transformers")
    root = shared_dir / INPUTS
    shutil.rmtree(root, ignore_errors=True)
    (root / "model").mkdir(parents=True)
    root.chmod(0o777)
    train = conversations()
    with (root / "chat.jsonl").open("w") as f:
        f.writelines(json.dumps({"messages": m}) + "\n" for m in train * 4)
    with (root / "eval.jsonl").open("w") as f:
        f.writelines(json.dumps({"messages": EVAL_CONVERSATION}) + "\n" for _ in range(16))
    texts = [message["content"] for conversation in train + [EVAL_CONVERSATION] for message in conversation]
    write_llama(root / "model", write_tokenizer(root / "model", texts))
    for path in root.rglob("*"):  # save_pretrained writes its shards 0600: the pods run as uid 1000
        path.chmod(0o777 if path.is_dir() else 0o644)
    from transformers import AutoTokenizer

    rendered = AutoTokenizer.from_pretrained(root / "model").apply_chat_template(EVAL_CONVERSATION)["input_ids"]
    assert len(rendered) == SEQ_LEN, f"the eval conversation is {len(rendered)} tokens, not seqLen {SEQ_LEN}"
    yield root
    shutil.rmtree(root, ignore_errors=True)


def finetune_job(name: str, image: str) -> dict:
    pod_inputs = f"{MOUNT}/{INPUTS}"
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "image": image,
            "nodes": 2,
            "procsPerNode": 1,
            "resources": {"cpu": "500m", "memory": "2Gi"},
            "model": {"pretrained": {"path": f"{pod_inputs}/model"}},
            "data": {"source": "prepared", "path": f"{pod_inputs}/prepared", "seqLen": SEQ_LEN,
                     "prepare": {"inputs": [f"{pod_inputs}/chat.jsonl"], "messagesField": "messages",
                                 "evalInputs": [f"{pod_inputs}/eval.jsonl"]}},
            "training": {"steps": STEPS, "globalBatchSize": 8, "lr": 0.003, "precision": "fp32",
                         "eval": {"everySteps": 10, "batches": 1}},
            "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "phalanx-shared"}}, "mountPath": MOUNT,
                           "async": False, "exportHuggingFace": True},
            "failurePolicy": {"maxRestarts": 0},
        },
    }


def prepared_eval_samples(prepared: Path):
    """(input ids, labels) of every sample of the prepared directory's eval split, as the runtime's
    loader makes them: labels -100 where a token does not count (the user's turns)."""
    from phalanx_runtime.components.data import PreparedSource

    source = PreparedSource(str(prepared), SEQ_LEN, split="eval")
    samples = []
    for i in range(len(source)):
        row = source[i]
        labels = row[1:].clone()
        if source.masked:
            labels[~source.label_mask(i)] = -100
        samples.append((row[:-1], labels))
    return samples


def transformers_eval_loss(model_dir: Path, samples) -> float:
    """Mean cross-entropy over the counted label tokens of ``samples``, by transformers' model."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for input_ids, labels in samples:
            logits = model(input_ids=torch.as_tensor(input_ids).view(1, -1)).logits[0].float()
            labels = torch.as_tensor(labels).view(-1)
            total += torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100, reduction="sum").item()
            count += int((labels != -100).sum())
    return total / count


def test_pretrained_model_prepares_trains_evaluates_and_exports(jobs, runtime_image, shared_dir, inputs):
    name = "e2e-pretrained"
    jobs.create(finetune_job(name, runtime_image))
    final = follow(jobs, name, lambda s: s.get("phase") == "Succeeded", 600)[-1]
    assert final["step"] == STEPS and final.get("restarts", 0) == 0, final
    eval_loss = final["metrics"]["eval_loss"]
    assert math.isfinite(eval_loss), final
    assert final["metrics"]["perplexity"] == pytest.approx(math.exp(eval_loss), rel=1e-4), final
    assert jobs.table_row(name)["EvalLoss"] == pytest.approx(eval_loss), "kubectl get tj -o wide shows it"

    exported = shared_dir / jobs.ns / name / "final" / "hf"
    assert (exported / "config.json").is_file(), sorted(p.name for p in exported.parent.iterdir())
    index = json.loads((exported / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert shards and all((exported / shard).is_file() for shard in shards), shards
    assert (exported / "tokenizer.json").is_file()

    samples = prepared_eval_samples(inputs / "prepared")
    assert samples, "the prepared directory has no eval split"
    assert transformers_eval_loss(exported, samples) == pytest.approx(eval_loss, rel=1e-4)
