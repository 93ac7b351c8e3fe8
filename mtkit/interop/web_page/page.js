// The page of an mtkit web export: translates in the browser, transformers.js loading the model and its tokenizer,
// a greedy loop of its own running the graphs on onnxruntime-web's WebAssembly backend. Every file comes from this
// page's own folder (the library, its WebAssembly, the model), so it works offline once loaded.
// window.mtkit = {ready, translate(lines)} for scripts: one translation per line, in order.
import { Tensor, env, pipeline } from "./transformers.min.js";

const $ = (id) => document.getElementById(id);
const here = new URL(".", location.href).href;
const params = new URLSearchParams(location.search);
// lines decoded together (sorted by length): a step costs little more for more lines; ?batch=N sets it
const BATCH = Number(params.get("batch")) > 0 ? Number(params.get("batch")) : 32;

env.allowLocalModels = true;
env.allowRemoteModels = false;
// a path, not a URL: transformers.js looks for local files only at paths (the page's folder, wherever it is served)
env.localModelPath = new URL("models/", here).pathname;
env.useBrowserCache = false; // the files are the page's own; the browser's HTTP cache already keeps them
env.backends.onnx.wasm.wasmPaths = {
  mjs: here + "ort-wasm-simd-threaded.asyncify.mjs",
  wasm: here + "ort-wasm-simd-threaded.asyncify.wasm",
};
const wanted = Number(params.get("threads"));
if (wanted > 0) env.backends.onnx.wasm.numThreads = wanted; // else onnxruntime-web's choice (1 without isolation)

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

function megabytes(bytes) {
  return `${(bytes / 2 ** 20).toFixed(1)} MB`;
}

async function load() {
  const answer = await fetch(here + "mtkit-web.json");
  if (!answer.ok) throw new Error(`mtkit-web.json: ${answer.status} ${answer.statusText}`);
  const meta = await answer.json();
  $("source").replaceChildren(new Option(meta.source_name, meta.source));
  $("target").replaceChildren(new Option(meta.target_name, meta.target));
  $("model-size").textContent = `Model: ${megabytes(meta.model_bytes)} (${meta.quantization})`;
  const progress = (event) => {
    if (event.status !== "progress_total" || !(event.total > 0)) return; // the model's files, all together
    $("progress").value = Math.min(1, event.loaded / event.total);
    $("loading-text").textContent = `Loading the model: ${megabytes(event.loaded)} of ${megabytes(event.total)}`;
  };
  const translator = await pipeline("translation", meta.model, {
    dtype: meta.dtype,
    device: "wasm",
    progress_callback: progress,
  });
  const threads = env.backends.onnx.wasm.numThreads || 1;
  $("threads").textContent = `${threads} thread${threads === 1 ? "" : "s"}${crossOriginIsolated ? "" : " (no cross-origin isolation)"}`;
  $("loading").hidden = true;
  return { translator, meta };
}

const ready = load();

// A copy of the rows ``keep`` of a tensor whose first dimension is the batch.
function rowsOf(tensor, keep) {
  const [rows, ...rest] = tensor.dims;
  const stride = tensor.data.length / rows;
  const data = new tensor.data.constructor(keep.length * stride);
  keep.forEach((row, k) => data.set(tensor.data.subarray(row * stride, (row + 1) * stride), k * stride));
  return new Tensor(tensor.type, data, [keep.length, ...rest]).ort_tensor;
}

// The sessions run one batch at a time, as transformers.js runs its own in a browser: translations that overlap
// (typing, a script) take turns, batch by batch.
let turn = Promise.resolve();
function inTurn(work) {
  const done = turn.then(work, work);
  turn = done.catch(() => undefined);
  return done;
}

// Where the time goes, since the page loaded (window.mtkit.spent(); scripts/bench_web.py prints it): seconds in the
// encoder's and the decoder's onnxruntime-web calls, the decoder's calls, the rows they computed, and the rows that
// stepping every line of a batch until its last one ends would have computed.
const spent = { encoder_s: 0, decoder_s: 0, decoder_calls: 0, rows: 0, whole_batch_rows: 0 };

async function timed(session, feeds, key) {
  const start = performance.now();
  const found = await session.run(feeds);
  spent[key] += (performance.now() - start) / 1000;
  return found;
}

// Greedy search over the exported graphs, which hold mtkit's rules (no PAD or start token, the output limit): the
// encoder once, then one decoder step at a time with its caches. A row leaves the batch when it gives EOS, so a
// step computes only the rows still going (transformers.js' generate steps every row until the last one ends).
// -> each row's output token ids, EOS excluded.
async function greedy(model, inputIds, mask, count, width, maxNew) {
  const { model: encoder, decoder_model_merged: decoder } = model.sessions;
  const ids = (data, dims) => new Tensor("int64", data, dims).ort_tensor;
  const encoded = { input_ids: ids(inputIds, [count, width]), attention_mask: ids(mask, [count, width]) };
  const { last_hidden_state: states } = await timed(encoder, encoded, "encoder_s");
  const eos = model.generation_config.eos_token_id;
  const outputs = Array.from({ length: count }, () => []);
  let alive = [...Array(count).keys()]; // the batch's rows still going, in the order of the caches' rows
  let feeds = { encoder_attention_mask: ids(mask, [count, width]), encoder_hidden_states: states };
  const heads = model.config.decoder_attention_heads;
  const empty = new Tensor("float32", new Float32Array(0), [count, heads, 0, model.config.d_model / heads]).ort_tensor;
  for (const name of decoder.inputNames) if (name.startsWith("past_key_values.")) feeds[name] = empty;
  let last = new BigInt64Array(count).fill(BigInt(model.generation_config.decoder_start_token_id));
  for (let step = 0; alive.length && step < maxNew; step++) {
    const found = await timed(decoder, { ...feeds, input_ids: ids(last, [alive.length, 1]) }, "decoder_s");
    spent.decoder_calls += 1;
    spent.rows += alive.length;
    spent.whole_batch_rows += count;
    const logits = found.logits.data;
    const vocab = logits.length / alive.length;
    const keep = [];
    const next = [];
    alive.forEach((row, r) => {
      let best = 0;
      for (let v = 1, base = r * vocab; v < vocab; v++) if (logits[base + v] > logits[base + best]) best = v;
      if (best === eos) return;
      outputs[row].push(best);
      keep.push(r);
      next.push(BigInt(best));
    });
    const whole = keep.length === alive.length;
    const carry = (tensor) => (whole ? tensor : rowsOf(tensor, keep));
    const passed = {};
    for (const name of ["encoder_attention_mask", "encoder_hidden_states"]) passed[name] = carry(feeds[name]);
    for (const name of decoder.inputNames) {
      if (name.startsWith("past_key_values.")) {
        passed[name] = carry(found[name.replace("past_key_values.", "present.")]);
      }
    }
    feeds = passed;
    alive = keep.map((r) => alive[r]);
    last = BigInt64Array.from(next);
  }
  return outputs;
}

// One translation per line, in order. As mtkit translate does, a line keeps its leading and trailing whitespace
// around its translation, and a line of whitespace alone is translated to an empty line. A line is translated as one
// sentence (mtkit translate cuts a line of several sentences first: docs/browser.md).
async function translate(lines) {
  if (!Array.isArray(lines) || !lines.every((line) => typeof line === "string")) {
    throw new TypeError("translate(lines): lines must be an array of strings");
  }
  const { translator, meta } = await ready;
  const out = new Array(lines.length).fill("");
  const todo = [];
  lines.forEach((line, i) => {
    const [, lead, text, trail] = line.match(/^(\s*)([\s\S]*?)(\s*)$/);
    if (text) todo.push({ i, lead, text, trail });
  });
  todo.sort((a, b) => a.text.length - b.text.length); // lines of a length together: less padding, fewer steps
  const { model, tokenizer } = translator;
  const pad = BigInt(model.generation_config.pad_token_id);
  for (let start = 0; start < todo.length; start += BATCH) {
    const batch = todo.slice(start, start + BATCH);
    // a source of more than max_positions - 1 subwords keeps its first ones and its EOS, as mtkit's engines cut it
    const ids = batch.map((item) => {
      // a model that reads its source language's tag first gets it as mtkit writes it (data.source_tag)
      const seq = tokenizer.encode(meta.source_prefix ? `${meta.source_prefix} ${item.text}` : item.text);
      return seq.length > meta.max_source ? [...seq.slice(0, meta.max_source - 1), seq[seq.length - 1]] : seq;
    });
    const width = Math.max(...ids.map((seq) => seq.length));
    const inputIds = new BigInt64Array(batch.length * width).fill(pad);
    const mask = new BigInt64Array(batch.length * width);
    ids.forEach((seq, row) => seq.forEach((id, col) => {
      inputIds[row * width + col] = BigInt(id);
      mask[row * width + col] = 1n;
    }));
    const rows = await inTurn(() => greedy(model, inputIds, mask, batch.length, width, meta.max_new_tokens));
    const texts = tokenizer.batch_decode(rows, { skip_special_tokens: true });
    batch.forEach((item, k) => (out[item.i] = item.lead + texts[k] + item.trail));
  }
  return out;
}

window.mtkit = { ready: ready.then(() => undefined), translate, spent: () => ({ ...spent }) };

// ------------------------------------------------------------------------------------------- the page
const state = { seq: 0, timer: 0, shown: "" };

function changed() {
  $("count").textContent = `${$("input").value.length} characters`;
  clearTimeout(state.timer);
  state.timer = setTimeout(translateText, 250);
}

async function translateText() {
  const seq = ++state.seq;
  const lines = $("input").value.split("\n");
  $("output").setAttribute("aria-busy", "true");
  try {
    const translated = await translate(lines);
    if (seq !== state.seq) return; // a newer text was typed meanwhile
    state.shown = translated.join("\n");
    $("output").textContent = state.shown;
    showError("");
  } catch (err) {
    if (seq === state.seq) showError(err.message || String(err));
  } finally {
    if (seq === state.seq) $("output").removeAttribute("aria-busy");
  }
}

async function copy() {
  try {
    await navigator.clipboard.writeText(state.shown);
  } catch {
    const range = document.createRange(); // no clipboard API (a page not served over https): select and copy
    range.selectNodeContents($("output"));
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    document.execCommand("copy");
  }
  $("copy").textContent = "Copied";
  setTimeout(() => ($("copy").textContent = "Copy"), 1500);
}

$("input").addEventListener("input", changed);
$("copy").addEventListener("click", copy);
changed();
ready.catch((err) => {
  $("loading").hidden = true;
  showError(`The model did not load: ${err.message || err}`);
});
