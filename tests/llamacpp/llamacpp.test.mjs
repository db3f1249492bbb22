// GGUF files canvas writes, loaded by llama.cpp (node-llama-cpp's prebuilt CPU build): the general.* and
// tokenizer keys are llama.cpp's, the tokenizers split text into the same ids, and greedy decoding of a
// llama-architecture model gives the same tokens as `canvas generate --mode ar`.
// Run by run_tests.sh (ctest LlamaCppCli.*) with CANVAS_BINARY and CANVAS_SOURCE set.
import {test, before, after} from "node:test";
import assert from "node:assert/strict";
import {execFileSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const canvas = process.env.CANVAS_BINARY;
const source = process.env.CANVAS_SOURCE;
assert.ok(canvas && source, "set CANVAS_BINARY and CANVAS_SOURCE");

const prompts = ["In the beginning God", "And the LORD said unto Moses,", "Blessed are the", "\n\n1:1 "];
// Strings for tokenizer agreement: spaces, newlines, digits, punctuation, multi-byte UTF-8, an emoji and
// special-token text.
const texts = [...prompts, " hello  world\n\nAnd", "ünïcödé 123 4567 🙂", "it's 3.14, isn't it?!", "\t tabs\tand   runs ",
               "<mask> <bos> text<eos>"];

let dir, llama;
const run = (...args) => execFileSync(canvas, args, {encoding: "utf8", stdio: ["ignore", "pipe", "pipe"]});

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "canvas-llamacpp-"));
  // The shipped AR model rewritten by canvas's GGUF writer (f32 and q8_0).
  for (const type of ["f32", "q8_0"])
    run("quantize", path.join(source, "models/text-ar.gguf"), path.join(dir, `text-ar-${type}.gguf`), type);
  // A model exported by `canvas train`: llama architecture with the subword (gemma4) tokenizer. One step at
  // a tiny learning rate keeps the weights near their random init, so greedy picks vary from token to token.
  const cfg = path.join(dir, "tiny.cfg");
  fs.writeFileSync(cfg, [
    "task = text", "objective = ar", "layers = 2", "hidden = 32", "heads = 2", "kv_heads = 1", "ffn = 64",
    "position_embedding = false", "rope_theta = 10000", "seq_len = 32", "text_corpus = kjv",
    `tokenizer = ${path.join(source, "models/tokenizer-kjv.gguf")}`, "val_fraction = 0.02", "eval_examples = 4",
    "batch_size = 4", "steps = 1", "lr = 1e-6", "warmup = 1", "seed = 1", "eval_every = 1", "checkpoint_every = 1",
    ""].join("\n"));
  run("train", "--config", cfg, "--out", path.join(dir, "tiny"), "-t", "1");
  // Prebuilt CPU binaries only: never build llama.cpp from source, never download anything.
  llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, progressLogs: false,
                          logLevel: LlamaLogLevel.error});
});

after(() => {
  if (dir) fs.rmSync(dir, {recursive: true, force: true});
});

const canvasIds = (model, text, bos) =>
  JSON.parse(run("tokenize", "-m", model, "-p", text, "--json", ...(bos ? ["--bos"] : []))).ids;

async function greedyInLlamaCpp(model, promptIds, n) {
  const context = await model.createContext({contextSize: 256, batchSize: 256, threads: 1});
  try {
    const out = [];
    for await (const t of context.getSequence().evaluate(promptIds, {temperature: 0})) {
      out.push(t);
      if (out.length >= n) break;
    }
    return out;
  } finally {
    await context.dispose();
  }
}

const cases = [
  {file: "text-ar-f32.gguf", fileType: 0, pre: "gpt-2", tokenizer: "gpt2"},
  {file: "text-ar-q8_0.gguf", fileType: 7, pre: "gpt-2", tokenizer: "gpt2"},
  {file: "tiny/model.gguf", fileType: 0, pre: undefined, tokenizer: "gemma4"},
];

for (const c of cases) {
  test(`llama.cpp loads ${c.file} with llama.cpp's general and tokenizer keys`, async () => {
    const model = await llama.loadModel({modelPath: path.join(dir, c.file)});
    try {
      const md = model.fileInfo.metadata;
      assert.equal(md.general.architecture, "llama");
      assert.equal(md.general.file_type, c.fileType);
      assert.equal(md.general.quantization_version, 2);
      assert.ok(md.general.name.length > 0);
      assert.equal(md.tokenizer.ggml.model, c.tokenizer);
      assert.equal(md.tokenizer.ggml.pre, c.pre);
    } finally {
      await model.dispose();
    }
  });

  test(`llama.cpp tokenizes like canvas (${c.file})`, async () => {
    const file = path.join(dir, c.file);
    const model = await llama.loadModel({modelPath: file});
    try {
      // canvas tokenize parses special-token text, as llama.cpp does with special tokens on.
      for (const text of texts)
        assert.deepEqual(Array.from(model.tokenize(text, true)), canvasIds(file, text, false), JSON.stringify(text));
    } finally {
      await model.dispose();
    }
  });

  test(`llama.cpp greedy decoding gives canvas generate --mode ar's tokens (${c.file})`, async (t) => {
    const file = path.join(dir, c.file);
    const model = await llama.loadModel({modelPath: file});
    try {
      let compared = 0;
      for (const prompt of prompts) {
        const ours = JSON.parse(run("generate", "-m", file, "-p", prompt, "-n", "24", "--mode", "ar", "--temp", "0",
                                    "--json", "-t", "1"));
        // The same prompt ids in both (canvas generate adds BOS when the vocabulary says add_bos_token).
        const promptIds = canvasIds(file, prompt, model.fileInfo.metadata.tokenizer.ggml.add_bos_token === true);
        assert.equal(promptIds.length, ours.prompt_tokens, `prompt ids of ${JSON.stringify(prompt)}`);
        const theirs = await greedyInLlamaCpp(model, promptIds, ours.tokens.length);
        // llama.cpp ends generation at any end-of-generation token (for a gemma4 vocabulary also <turn|> and
        // <|tool_response>); canvas generate --mode ar only at the vocabulary's EOS id. Up to there the
        // tokens must be the same.
        assert.deepEqual(theirs, ours.tokens.slice(0, theirs.length), `greedy tokens after ${JSON.stringify(prompt)}`);
        if (theirs.length < ours.tokens.length)
          assert.ok(model.isEogToken(ours.tokens[theirs.length]),
                    `llama.cpp stopped after ${theirs.length} tokens of ${JSON.stringify(prompt)} before a non-EOG token`);
        compared += theirs.length;
      }
      assert.ok(compared >= 2 * prompts.length, `only ${compared} generated tokens compared`);
      t.diagnostic(`${compared} greedy tokens equal over ${prompts.length} prompts`);
    } finally {
      await model.dispose();
    }
  });
}

// Every model shipped in models/ as it is committed: a file whose architecture llama.cpp knows must load
// there with llama.cpp's keys; the others (DiffusionGemma, a vocabulary-only file) are listed as skipped
// with the reason, so a new shipped file cannot go untested silently.
const llamaCppArchitectures = new Set(["llama", "llada", "dream", "qwen2", "gemma4"]);
test("llama.cpp loads every shipped model whose architecture it knows", async (t) => {
  const models = fs.readdirSync(path.join(source, "models")).filter((f) => f.endsWith(".gguf")).sort();
  let loaded = 0;
  for (const f of models) {
    const file = path.join(source, "models", f);
    const table = run("inspect", file);
    const arch = (table.match(/general\.architecture\s+string\s+"([^"]*)"/) || [])[1];
    if (!llamaCppArchitectures.has(arch)) {
      t.diagnostic(`${f}: skipped (${arch === undefined ? "a vocabulary-only file" : `architecture ${arch}`})`);
      continue;
    }
    // Learned absolute positions (the Sudoku model's 81 cells) are canvas's own: llama.cpp's graphs for
    // these architectures have no such tensor and refuse the file on its tensor count.
    if (/position_embd\.weight/.test(table)) {
      await assert.rejects(llama.loadModel({modelPath: file}), undefined, `${f}: expected llama.cpp to refuse position_embd`);
      t.diagnostic(`${f}: refused by llama.cpp as expected (position_embd.weight, learned positions)`);
      continue;
    }
    const model = await llama.loadModel({modelPath: file});
    try {
      const md = model.fileInfo.metadata;
      assert.equal(md.general.architecture, arch, f);
      assert.equal(md.general.quantization_version, 2, f);
      assert.ok(Number.isInteger(md.general.file_type), `${f}: general.file_type`);
      assert.ok(model.tokenize("In the beginning", false).length > 0, f);
      loaded += 1;
    } finally {
      await model.dispose();
    }
  }
  assert.ok(loaded >= 2, `only ${loaded} shipped models loaded`);  // text-ar and text-masked
  t.diagnostic(`${loaded} of ${models.length} shipped files loaded by llama.cpp`);
});
