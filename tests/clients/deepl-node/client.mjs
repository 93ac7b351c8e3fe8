// DeepL's official Node.js client (deepl-node, pinned in package-lock.json) against `mtkit serve`'s DeepL API v2
// routes: what an integration written for Node.js calls, each answer as the client gives it, printed as one JSON
// object for tests/test_deepl.py to hold against the model.
//
//   node client.mjs SERVER_URL AUTH_KEY FOLDER
//
// FOLDER holds the documents to translate (doc.txt, doc.docx); their translations are written beside them
// (out.txt, out.docx).
import path from "node:path";
import * as deepl from "deepl-node";

const [serverUrl, authKey, folder] = process.argv.slice(2);
const translator = new deepl.Translator(authKey, { serverUrl, maxRetries: 0 });
const found = {};

// the name of the error class a call ends with ("none" when it succeeds)
async function failure(call) {
  try {
    await call();
    return "none";
  } catch (error) {
    return error.constructor.name;
  }
}

const one = await translator.translateText("A dog runs in the park .", null, "de");
found.one = { text: one.text, detected: one.detectedSourceLang, billed: one.billedCharacters };
const many = await translator.translateText(["Two cats eat bread .", "The man sits . A woman walks ."], "en", "de");
found.many = many.map((result) => result.text);
found.html = (
  await translator.translateText("A <b>man</b> sits in the <i>green</i> park .", "en", "de", { tagHandling: "html" })
).text;
found.sources = (await translator.getSourceLanguages()).map((language) => language.code);
found.targets = (await translator.getTargetLanguages()).map((language) => language.code);
found.pairs = (await translator.getGlossaryLanguagePairs()).map((pair) => `${pair.sourceLang}-${pair.targetLang}`);

const glossary = await translator.createGlossary(
  "node",
  "en",
  "de",
  new deepl.GlossaryEntries({ entries: { tree: "Garten" } }),
);
found.glossary = { name: glossary.name, entries: glossary.entryCount, ready: glossary.ready };
found.listed = (await translator.listGlossaries()).some((info) => info.glossaryId === glossary.glossaryId);
found.entries = (await translator.getGlossaryEntries(glossary)).entries();
found.withGlossary = (
  await translator.translateText(["A dog sits under the tree .", "Two cats eat bread ."], "en", "de", { glossary })
).map((result) => result.text);
await translator.deleteGlossary(glossary);
found.deleted = await failure(() => translator.getGlossary(glossary.glossaryId));

for (const name of ["doc.txt", "doc.docx"]) {
  const out = path.join(folder, name.replace("doc", "out"));
  const status = await translator.translateDocument(path.join(folder, name), out, "en", "de");
  found[name] = status.status;
}

const usage = await translator.getUsage();
found.usage = { count: usage.character.count, limit: usage.character.limit };
found.wrongKey = await failure(() =>
  new deepl.Translator("wrong", { serverUrl, maxRetries: 0 }).translateText("a dog", null, "de"),
);
const past = usage.character.limit - usage.character.count + 1; // one character more than is left
found.overLimit = await failure(() => translator.translateText("a".repeat(past), null, "de"));
process.stdout.write(JSON.stringify(found) + "\n");
