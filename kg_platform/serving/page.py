"""The question page `kg serve` shows at ``/``: a box, and the answer of ``POST /ask`` in
plain words. Everything the server returns is put in with ``textContent`` (never as HTML),
and PMIDs become links to their PubMed page. The box's placeholder is a question the served
build answers (made from the graph when the service warms up); the page says when no reader
is loaded (no yes/no answers, evidence only) and when the corpus is synthetic (its PMIDs are
not the real articles', so the PubMed links open unrelated papers)."""

import os
from html import escape
from pathlib import Path

# asked of a build that answers none of the questions made from it (or before one is open)
FALLBACK_EXAMPLE = "Does aspirin prevent myocardial infarction?"
SYNTHETIC_NOTE = (
    "This build is made from the synthetic demo corpus: its articles are invented, and a "
    "PMID link opens whatever real PubMed article has that number, unrelated to the evidence."
)
NO_READER_NOTE = (
    "No reader is loaded: answers give the verdict and the evidence, not a yes/no answer "
    "(start `kg serve --reader DIR`, or set KG_READER)."
)


def render_page(example: str | None, synthetic: bool, reader: str | None) -> str:
    """The page with ``example`` as the placeholder question, and its notes."""
    notes = []
    if synthetic:
        notes.append(f'<p class="note" id="synthetic-note">{escape(SYNTHETIC_NOTE)}</p>')
    notes.append(
        f'<p class="note" id="reader-note">{escape(NO_READER_NOTE)}</p>'
        if reader is None
        else f'<p class="note" id="reader-note">Reader: {escape(reader)}</p>'
    )
    return PAGE.replace("__EXAMPLE__", escape(example or FALLBACK_EXAMPLE, quote=True)).replace(
        "__NOTES__", "\n".join(notes)
    )


PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>kg: ask the graph</title>
<style>
 body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; }
 input[type=text] { width: 70%; padding: .4rem; font-size: 1rem; }
 button { padding: .4rem 1rem; font-size: 1rem; }
 .refused { color: #8a1c1c; } .answerable { color: #1c5e1c; }
 section { margin-top: 1.2rem; } li { margin: .2rem 0; } code { font-size: .9rem; }
 #error { color: #8a1c1c; } .note { color: #5a4a00; font-size: .9rem; }
</style>
</head>
<body>
<h1>Ask the graph</h1>
__NOTES__
<form id="ask">
 <input type="text" id="question" name="question" maxlength="1000"
        placeholder="__EXAMPLE__" aria-label="question">
 <button type="submit">Ask</button>
</form>
<p id="error" role="alert"></p>
<div id="result" hidden>
 <section><h2>Verdict</h2><p id="verdict"></p><p id="explanation"></p></section>
 <section id="answer-section" hidden><h2>Answer</h2><p id="answer"></p></section>
 <section><h2>Groundings</h2><ul id="groundings"></ul></section>
 <section><h2>Chosen pair</h2><p id="pair"></p></section>
 <section><h2>Evidence</h2><ol id="evidence"></ol></section>
 <p><small id="build"></small></p>
</div>
<script>
const PUBMED = "https://pubmed.ncbi.nlm.nih.gov/";
function el(tag, text) { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; return e; }
function pmidLink(pmid) {
  const a = el("a", "PMID " + pmid); a.href = PUBMED + encodeURIComponent(pmid) + "/";
  a.className = "pmid"; a.target = "_blank"; a.rel = "noopener"; return a;
}
function plainVerdict(v) {
  if (v.answerable) return "Answerable: the graph holds evidence for this question.";
  return "Refused at gate " + v.gate + " (" + String(v.reason).replace(/_/g, " ") + ").";
}
function show(doc) {
  document.getElementById("result").hidden = false;
  const verdict = document.getElementById("verdict");
  verdict.textContent = plainVerdict(doc.verdict);
  verdict.className = doc.verdict.answerable ? "answerable" : "refused";
  document.getElementById("explanation").textContent = doc.verdict.explanation;
  const g = document.getElementById("groundings"); g.replaceChildren();
  for (const x of doc.groundings) g.append(el("li", x.name + " (" + x.ui + "), " + x.role + ", from \\u201c" + x.surface + "\\u201d"));
  if (!doc.groundings.length) g.append(el("li", "nothing in the question names a MeSH descriptor"));
  const p = doc.chosen_pair;
  document.getElementById("pair").textContent = p ? p.a.name + " + " + p.b.name + " (" + p.major_co_annotations + " articles with both as major topics)" : "none";
  const ev = document.getElementById("evidence"); ev.replaceChildren();
  for (const e of doc.evidence) {
    const li = el("li");
    li.append(el("span", e.kind + " "));
    e.hops.forEach((h, i) => {
      if (i) li.append(el("span", h.relation === "cites" ? " cites " : " is cited by "));
      li.append(pmidLink(h.pmid));
    });
    if (e.year) li.append(el("span", " (" + e.year + ")"));
    if (e.title) li.append(el("span", ": " + e.title));
    ev.append(li);
  }
  if (!doc.evidence.length) ev.append(el("li", "no evidence shown"));
  const a = doc.answer, section = document.getElementById("answer-section"), out = document.getElementById("answer");
  const why = doc.answer_reason;
  section.hidden = !a && !(doc.verdict.answerable && why); out.replaceChildren();
  if (!a && why) out.append(el("span", why.code === "no_reader" ? "No reader loaded: no yes/no answer, the evidence above is the answer." : "No answer (" + why.code + "): " + why.detail));
  if (a) {
    out.append(el("span", a.label + " (probability " + a.probability + "), read: "));
    a.read.forEach((r, i) => { if (i) out.append(el("span", ", ")); out.append(pmidLink(r.pmid)); });
  }
  document.getElementById("build").textContent = "graph build " + doc.graph_build;
}
document.getElementById("ask").addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = document.getElementById("error"); error.textContent = "";
  const response = await fetch("/ask", {method: "POST", headers: {"content-type": "application/json"},
    body: JSON.stringify({question: document.getElementById("question").value})});
  const doc = await response.json();
  if (!response.ok) { document.getElementById("result").hidden = true; error.textContent = doc.error; return; }
  show(doc);
});
</script>
</body>
</html>
"""


def corpus_is_synthetic(lake: str | None) -> bool:
    """Whether the lake served was built from the synthetic demo corpus: the home's own lake,
    its recorded PubMed source the synthetic folder `kg build` writes when NLM cannot be
    reached, or NLM with that folder written (the demo)."""
    from kg_platform.settings import NLM_PUBMED_URL, Settings

    settings = Settings.load()
    if lake is not None and os.path.realpath(lake) != os.path.realpath(settings.lake):
        return False
    synthetic = settings.home / "synthetic"
    source = settings.pubmed_source
    if source != NLM_PUBMED_URL:
        return Path(source).resolve() == synthetic.resolve()
    return (synthetic / "baseline").is_dir()
