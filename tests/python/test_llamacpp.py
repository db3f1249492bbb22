# GGUF files canvas writes, loaded by llama.cpp (llama-cpp-python, built from source by scripts/setup.sh): the
# general.* and tokenizer keys are llama.cpp's, the tokenizers split text into the same ids, and greedy decoding
# of a llama-architecture model gives the same tokens as `canvas generate --mode ar`.
# Run by run_tests.sh (ctest LlamaCppCli.*) with CANVAS_BINARY and CANVAS_SOURCE set.
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from llama_cpp import Llama

CANVAS = os.environ.get("CANVAS_BINARY")
SOURCE = Path(os.environ.get("CANVAS_SOURCE", "."))

PROMPTS = ["In the beginning God", "And the LORD said unto Moses,", "Blessed are the", "\n\n1:1 "]
# Strings for tokenizer agreement: spaces, newlines, digits, punctuation, multi-byte UTF-8, an emoji and
# special-token text.
TEXTS = PROMPTS + [" hello  world\n\nAnd", "ünïcödé 123 4567 🙂", "it's 3.14, isn't it?!", "\t tabs\tand   runs ",
                   "<mask> <bos> text<eos>"]
# file, general.file_type, tokenizer.ggml.pre, tokenizer.ggml.model
CASES = [("text-ar-f32.gguf", 0, "gpt-2", "gpt2"), ("text-ar-q8_0.gguf", 7, "gpt-2", "gpt2"),
         ("tiny/model.gguf", 0, None, "gemma4")]


def canvas(*args):
    return subprocess.run([CANVAS, *args], check=True, capture_output=True, text=True).stdout


def canvas_ids(model, text, bos):
    return json.loads(canvas("tokenize", "-m", str(model), "-p", text, "--json", *(["--bos"] if bos else [])))["ids"]


def load(path, logits_all=False):
    return Llama(model_path=str(path), n_ctx=256, n_batch=256, n_threads=1, logits_all=logits_all, verbose=False)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    assert CANVAS, "set CANVAS_BINARY and CANVAS_SOURCE"
    out = tmp_path_factory.mktemp("canvas-llamacpp")
    # The shipped AR model rewritten by canvas's GGUF writer (f32 and q8_0).
    for t in ("f32", "q8_0"):
        canvas("quantize", str(SOURCE / "models/text-ar.gguf"), str(out / f"text-ar-{t}.gguf"), t)
    # A model exported by `canvas train`: llama architecture with the subword (gemma4) tokenizer. One step at a
    # tiny learning rate keeps the weights near their random init, so greedy picks vary from token to token.
    cfg = out / "tiny.cfg"
    cfg.write_text("\n".join([
        "task = text", "objective = ar", "layers = 2", "hidden = 32", "heads = 2", "kv_heads = 1", "ffn = 64",
        "position_embedding = false", "rope_theta = 10000", "seq_len = 32", "text_corpus = kjv",
        f"tokenizer = {SOURCE / 'models/tokenizer-kjv.gguf'}", "val_fraction = 0.02", "eval_examples = 4",
        "batch_size = 4", "steps = 1", "lr = 1e-6", "warmup = 1", "seed = 1", "eval_every = 1",
        "checkpoint_every = 1", ""]))
    canvas("train", "--config", str(cfg), "--out", str(out / "tiny"), "-t", "1")
    return out


def greedy_in_llamacpp(llm, prompt_ids, n):
    """Argmax of llama.cpp's logits, token after token (no sampler, no stop at end-of-generation tokens)."""
    llm.reset()
    llm.eval(prompt_ids)
    out = []
    for _ in range(n):
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(token)
        llm.eval([token])
    return out


@pytest.mark.parametrize("name,file_type,pre,tokenizer", CASES)
def test_llamacpp_loads_with_its_general_and_tokenizer_keys(files, name, file_type, pre, tokenizer):
    md = load(files / name).metadata
    assert md["general.architecture"] == "llama"
    assert int(md["general.file_type"]) == file_type
    assert int(md["general.quantization_version"]) == 2
    assert md.get("general.name")
    assert md["tokenizer.ggml.model"] == tokenizer
    assert md.get("tokenizer.ggml.pre") == pre


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_llamacpp_tokenizes_like_canvas(files, name):
    llm = load(files / name)
    for text in TEXTS:
        # canvas tokenize parses special-token text, as llama.cpp does with special tokens on.
        assert llm.tokenize(text.encode(), add_bos=False, special=True) == canvas_ids(files / name, text, False), \
            repr(text)


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_llamacpp_greedy_decoding_gives_canvas_ar_tokens(files, name):
    file = files / name
    llm = load(file, logits_all=True)  # llm.scores holds every evaluated row's logits
    add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token") == "true"
    compared = 0
    for prompt in PROMPTS:
        ours = json.loads(canvas("generate", "-m", str(file), "-p", prompt, "-n", "24", "--mode", "ar", "--temp", "0",
                                 "--json", "-t", "1"))
        # The same prompt ids in both (canvas generate adds BOS when the vocabulary says add_bos_token).
        prompt_ids = canvas_ids(file, prompt, add_bos)
        assert len(prompt_ids) == ours["prompt_tokens"], f"prompt ids of {prompt!r}"
        theirs = greedy_in_llamacpp(llm, prompt_ids, len(ours["tokens"]))
        assert theirs == ours["tokens"], f"greedy tokens after {prompt!r}"
        compared += len(theirs)
    assert compared >= 2 * len(PROMPTS), f"only {compared} generated tokens compared"
    print(f"{name}: {compared} greedy tokens equal over {len(PROMPTS)} prompts")


# Every model shipped in models/ as it is committed: a file whose architecture llama.cpp knows must load there
# with llama.cpp's keys; the others (DiffusionGemma, a vocabulary-only file) are listed with the reason, so a new
# shipped file cannot go untested silently.
LLAMACPP_ARCHITECTURES = {"llama", "llada", "dream", "qwen2", "gemma4"}


def test_llamacpp_loads_every_shipped_model_whose_architecture_it_knows():
    models = sorted((SOURCE / "models").glob("*.gguf"))
    loaded = 0
    for file in models:
        table = canvas("inspect", str(file))
        m = re.search(r'general\.architecture\s+string\s+"([^"]*)"', table)
        arch = m.group(1) if m else None
        if arch not in LLAMACPP_ARCHITECTURES:
            print(f"{file.name}: not loaded ({'a vocabulary-only file' if arch is None else f'architecture {arch}'})")
            continue
        # Learned absolute positions (the Sudoku model's 81 cells) are canvas's own: llama.cpp's graphs for these
        # architectures have no such tensor and refuse the file on its tensor count.
        if "position_embd.weight" in table:
            with pytest.raises(ValueError):
                load(file)
            print(f"{file.name}: refused by llama.cpp as expected (position_embd.weight, learned positions)")
            continue
        llm = load(file)
        md = llm.metadata
        assert md["general.architecture"] == arch, file.name
        assert int(md["general.quantization_version"]) == 2, file.name
        int(md["general.file_type"])
        assert len(llm.tokenize(b"In the beginning", add_bos=False)) > 0, file.name
        loaded += 1
    assert loaded >= 2, f"only {loaded} shipped models loaded"  # text-ar and text-masked
    print(f"{loaded} of {len(models)} shipped files loaded by llama.cpp")
