// mtkit serve's page: translates as you type through the server's own API (/v1/translate and LibreTranslate's
// routes), shows a sentence's n-best list and cross-attention from the same answer, and translates documents.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  settings: null, // GET frontend/settings
  languages: [], // GET languages: [{code, name, targets}]
  options: null, // what /v1/translate's options allow: {nbest, alignments}, from openapi.json
  seq: 0, // the number of the latest translation asked for: an answer to an older one is dropped
  pending: null, // the AbortController of the translation in flight
  timer: 0,
  detected: null, // the language the server took the text for (source auto)
  shown: null, // what the output shows: {translation, sentences} (a /v1/translate answer's text and sentences)
  glossaries: [], // GET v2/glossaries: [{glossary_id, name, source_lang, target_lang, entry_count}]
};

// ------------------------------------------------------------------------------------------- the server
async function call(path, init = {}) {
  const key = $("api-key").value.trim();
  const headers = { ...(init.headers || {}), ...(key ? { "X-API-Key": key } : {}) };
  let response;
  try {
    response = await fetch(path, { ...init, headers });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new Error("the server does not answer");
  }
  const isJson = (response.headers.get("content-type") || "").includes("json");
  const body = isJson ? await response.json().catch(() => null) : null;
  if (!response.ok) {
    const message = body && (body.error || body.detail);
    throw new Error(typeof message === "string" ? message : `${response.status} ${response.statusText}`.trim());
  }
  return body;
}

const post = (path, body, signal) =>
  call(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), signal });

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

function nameOf(code) {
  const found = state.languages.find((lang) => lang.code === code);
  return found ? found.name : code;
}

// ------------------------------------------------------------------------------------------- languages
function fillSelect(select, choices, wanted) {
  select.replaceChildren(...choices.map(([code, name]) => new Option(name, code)));
  const codes = choices.map(([code]) => code);
  select.value = codes.includes(wanted) ? wanted : codes[0] || "";
}

function targetsOf(source) {
  if (source !== "auto") return state.languages.find((lang) => lang.code === source)?.targets || [];
  return [...new Set(state.languages.flatMap((lang) => lang.targets))];
}

function fillTargets(wanted) {
  fillSelect($("target"), targetsOf($("source").value).map((code) => [code, nameOf(code)]), wanted);
  updateSwap();
  fillGlossaries();
}

function fromLanguage() {
  const source = $("source").value;
  return source === "auto" ? state.detected : source;
}

function updateSwap() {
  const from = fromLanguage();
  $("swap").disabled = !from || !targetsOf($("target").value).includes(from);
}

function swap() {
  const from = fromLanguage();
  const to = $("target").value;
  if (state.shown) $("input").value = state.shown.translation;
  $("source").value = to;
  fillTargets(from);
  changed(0);
}

// ------------------------------------------------------------------------------------------- glossaries
// The server's glossaries for the pair chosen (with source auto, the language detected): picking one makes each
// sentence holding a source term carry its target term.
async function loadGlossaries() {
  try {
    state.glossaries = (await call("v2/glossaries")).glossaries;
  } catch (err) {
    state.glossaries = []; // none, or a key still to give: the picker stays hidden
  }
  fillGlossaries();
}

function fillGlossaries() {
  const from = fromLanguage();
  const to = $("target").value;
  const fitting = state.glossaries.filter((g) => g.source_lang === from && g.target_lang === to);
  const wanted = $("glossary").value;
  const choices = [["", "No glossary"], ...fitting.map((g) => [g.glossary_id, `${g.name} (${g.entry_count})`])];
  fillSelect($("glossary"), choices, wanted);
  $("glossary-row").hidden = state.glossaries.length === 0;
}

function withGlossary(body) {
  const glossary = $("glossary").value;
  return glossary ? { ...body, glossary } : body;
}

function showDetected(found) {
  state.detected = found ? found.language : null;
  $("detected").textContent = found ? `Detected: ${nameOf(found.language)} (${Math.round(found.confidence)}%)` : "";
  updateSwap();
  fillGlossaries();
}

// ------------------------------------------------------------------------------------------- translation
function updateCount() {
  const count = $("input").value.length;
  const limit = state.settings ? state.settings.charLimit : 0;
  $("count").textContent = limit > 0 ? `${count} / ${limit} characters` : `${count} characters`;
  $("count").classList.toggle("over", limit > 0 && count > limit);
}

function changed(wait) {
  updateCount();
  clearTimeout(state.timer);
  state.timer = setTimeout(translate, wait);
}

async function translate() {
  if (state.pending) state.pending.abort();
  const seq = ++state.seq;
  const text = $("input").value;
  const source = $("source").value;
  const target = $("target").value;
  if (!text.trim()) {
    $("output").removeAttribute("aria-busy");
    showOutput(null);
    showDetected(null);
    showError("");
    return;
  }
  const pending = (state.pending = new AbortController());
  $("output").setAttribute("aria-busy", "true");
  try {
    // the whole text once, with each sentence's alternatives: what the details show is what the output shows
    const allowed = await requestOptions();
    const options = { nbest: allowed.nbest, scores: true, alignments: allowed.alignments };
    const body = withGlossary({ text, source, target, options });
    const answer = (await post("v1/translate", body, pending.signal)).translations[0];
    if (seq !== state.seq) return; // a newer translation was asked for meanwhile
    showError("");
    showDetected(source === "auto" ? answer.detected_language : null);
    showOutput({ translation: answer.text, sentences: answer.sentences || [] });
  } catch (err) {
    if (seq !== state.seq || err.name === "AbortError") return;
    showOutput(null);
    showError(err.message);
  } finally {
    if (seq === state.seq) $("output").removeAttribute("aria-busy");
  }
}

// The translation with each sentence the server cut as an inline button (a span: it wraps as the text around it
// does, where a button would be a box of its own); the server's offsets count code points, hence Array.from.
function showOutput(shown) {
  state.shown = shown;
  $("details").hidden = true;
  const output = $("output");
  if (!shown) {
    output.replaceChildren();
    return;
  }
  const chars = Array.from(shown.translation);
  const nodes = [];
  let at = 0;
  shown.sentences.forEach((sentence, i) => {
    nodes.push(chars.slice(at, sentence.start).join(""));
    const node = document.createElement("span");
    node.className = "sentence";
    node.tabIndex = 0;
    node.setAttribute("role", "button");
    node.textContent = chars.slice(sentence.start, sentence.end).join("");
    node.addEventListener("click", () => showDetails(i));
    node.addEventListener("keydown", (event) => {
      if (event.key !== "Enter" && event.key !== " ") return;
      event.preventDefault();
      showDetails(i);
    });
    nodes.push(node);
    at = sentence.end;
  });
  nodes.push(chars.slice(at).join(""));
  output.replaceChildren(...nodes);
}

async function copy() {
  const text = state.shown ? state.shown.translation : "";
  try {
    await navigator.clipboard.writeText(text);
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

// ------------------------------------------------------------------------------------------- alternatives
// What /v1/translate's options allow on this server, from its OpenAPI document: the most hypotheses a sentence
// may ask for under the models' own algorithm (the rule for a request naming none; at most 5 here) and whether
// its models give alignments.
async function requestOptions() {
  if (!state.options) {
    const schema = (await call("openapi.json")).components.schemas.RequestOptions;
    const props = schema.properties;
    const own = (schema.allOf || []).find((rule) => rule.if?.properties?.algorithm?.type === "null");
    const bound = own ? own.then.properties.nbest : props.nbest;
    const most = (bound.anyOf || []).find((choice) => choice.type === "integer")?.maximum;
    state.options = { nbest: Math.min(5, most || 5), alignments: props.alignments.const !== false };
  }
  return state.options;
}

// Sentence i's alternatives and alignment, from the answer the output shows: its first alternative is the
// sentence shown.
function showDetails(i) {
  const sentence = state.shown.sentences[i];
  $("details").hidden = false;
  $("details-source").textContent = sentence.source;
  const hyps = sentence.hypotheses;
  const items = hyps.map((hyp, k) => {
    const item = document.createElement("li");
    const pick = document.createElement("button");
    pick.type = "button";
    pick.className = "hypothesis";
    pick.textContent = hyp.text;
    pick.setAttribute("aria-pressed", String(k === 0));
    pick.addEventListener("click", () => {
      for (const other of $("alternatives").querySelectorAll(".hypothesis")) {
        other.setAttribute("aria-pressed", String(other === pick));
      }
      showAlignment(sentence.source_tokens, hyp);
    });
    const score = document.createElement("span");
    score.className = "score";
    if (hyp.score != null) score.textContent = `score ${hyp.score.toFixed(3)}, log-prob ${hyp.log_prob.toFixed(3)}`;
    item.append(pick, " ", score);
    return item;
  });
  $("alternatives").replaceChildren(...items);
  showAlignment(sentence.source_tokens, hyps[0]);
  $("details").scrollIntoView({ block: "nearest" });
}

// A hypothesis's cross-attention as a table: a row per source subword, a column per target subword (the
// end-of-sentence row and column left out), each cell shaded by its weight, its value in its title.
function showAlignment(sourceTokens, hyp) {
  const part = $("alignment-part");
  part.hidden = !sourceTokens || !hyp || !hyp.alignment;
  if (part.hidden) return;
  const cell = (tag, text, scope) => {
    const node = document.createElement(tag);
    node.textContent = text;
    if (scope) node.scope = scope;
    return node;
  };
  const head = document.createElement("tr");
  head.append(cell("th", "source \\ target", "col"), ...hyp.tokens.map((token) => cell("th", token, "col")));
  const weights = hyp.tokens.map((_, t) => sourceTokens.map((_, s) => hyp.alignment[t][s]));
  const most = Math.max(...weights.flat(), 1e-9); // shaded relative to the grid's largest weight
  const rows = sourceTokens.map((token, s) => {
    const row = document.createElement("tr");
    row.append(cell("th", token, "row"));
    hyp.tokens.forEach((target, t) => {
      const weight = weights[t][s];
      const td = cell("td", weight.toFixed(2));
      td.title = `${token} - ${target}: ${weight.toFixed(2)}`;
      td.style.backgroundColor = `rgba(37, 99, 235, ${(weight / most).toFixed(3)})`;
      td.classList.toggle("strong", weight / most > 0.6);
      row.append(td);
    });
    return row;
  });
  const caption = document.createElement("caption");
  caption.textContent = `Attention of "${hyp.text}" on its source`;
  const thead = document.createElement("thead");
  thead.append(head);
  const tbody = document.createElement("tbody");
  tbody.append(...rows);
  $("alignment").replaceChildren(caption, thead, tbody);
}

// ------------------------------------------------------------------------------------------- documents
async function translateFile(event) {
  event.preventDefault();
  const file = $("file").files[0];
  if (!file) return;
  const form = new FormData();
  form.append("file", file);
  form.append("source", $("source").value);
  form.append("target", $("target").value);
  if ($("glossary").value) form.append("glossary", $("glossary").value);
  $("download").hidden = true;
  $("translate-file").disabled = true;
  try {
    const answer = await call("translate_file", { method: "POST", body: form });
    showError("");
    $("download").href = answer.translatedFileUrl;
    $("download").textContent = `Download ${file.name} translated`;
    $("download").hidden = false;
    $("download").focus();
  } catch (err) {
    showError(err.message);
  } finally {
    $("translate-file").disabled = false;
  }
}

// ------------------------------------------------------------------------------------------- start
async function start() {
  try {
    [state.settings, state.languages] = await Promise.all([call("frontend/settings"), call("languages")]);
  } catch (err) {
    showError(err.message);
    return;
  }
  const settings = state.settings;
  const sources = state.languages.filter((lang) => lang.targets.length > 0);
  const choices = [["auto", "Detect language"], ...sources.map((lang) => [lang.code, lang.name])];
  fillSelect($("source"), choices, sources.length > 1 ? "auto" : settings.language.source.code);
  fillTargets(settings.language.target.code);
  $("key-row").hidden = !(settings.keyRequired || settings.apiKeys);
  $("files").hidden = !settings.filesTranslation;
  $("file").accept = settings.supportedFilesFormat.join(",");
  updateCount();
  await loadGlossaries();

  const wait = settings.frontendTimeout;
  $("input").addEventListener("input", () => changed(wait));
  $("input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) changed(0);
  });
  $("api-key").addEventListener("input", () => {
    loadGlossaries();
    changed(wait);
  });
  $("source").addEventListener("change", () => {
    showDetected(null);
    fillTargets($("target").value);
    changed(0);
  });
  $("target").addEventListener("change", () => {
    updateSwap();
    fillGlossaries();
    changed(0);
  });
  $("glossary").addEventListener("change", () => changed(0));
  $("swap").addEventListener("click", swap);
  $("copy").addEventListener("click", copy);
  $("close-details").addEventListener("click", () => ($("details").hidden = true));
  $("file-form").addEventListener("submit", translateFile);
  if ($("input").value) changed(0); // text the browser kept across a reload
}

start();
