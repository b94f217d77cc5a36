"""A synthetic PubMed release in NLM's layout, for load tests and for a demo without network.

``write_synthetic_release`` writes ``baseline/pubmed{YY}n{NNNN}.xml.gz`` and
``updatefiles/pubmed{YY}n{NNNN}.xml.gz`` (update numbers continue after the baseline's, as at
NLM), each beside an NLM ``.md5`` file. The records have the shape the pipeline meets in real
files:

- titles and abstracts (about half structured, with section labels) that mention the record's
  MeSH headings by name, so retrieval has something to find;
- 3-12 MeSH headings per record drawn from a vocabulary with Zipf-like popularity, about a
  third major, some with qualifiers;
- references only to earlier PMIDs, chosen by preferential attachment, so in-degree is
  heavy-tailed as in PubMed;
- in the update files: new records, revised re-issues of baseline records (same PMID, more
  headings), a few ``Version 2`` records, ``DeleteCitation`` lists, and retraction notices
  (``Retraction Notice`` with ``RetractionOf``) together with the re-issued retracted record
  (``Retracted Publication`` with ``RetractionIn``).

The same arguments give byte-identical files (fixed seed, gzip mtime 0).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import random
import re
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path

# real MeSH 2024 descriptors (UI, name); the test checks them against the MeSH table
DEFAULT_MESH_VOCABULARY: tuple[tuple[str, str], ...] = (
    ("D006801", "Humans"),
    ("D005260", "Female"),
    ("D008297", "Male"),
    ("D000328", "Adult"),
    ("D008875", "Middle Aged"),
    ("D000368", "Aged"),
    ("D000818", "Animals"),
    ("D012307", "Risk Factors"),
    ("D016896", "Treatment Outcome"),
    ("D002648", "Child"),
    ("D000293", "Adolescent"),
    ("D011379", "Prognosis"),
    ("D012189", "Retrospective Studies"),
    ("D011446", "Prospective Studies"),
    ("D051379", "Mice"),
    ("D015415", "Biomarkers"),
    ("D013997", "Time Factors"),
    ("D011795", "Surveys and Questionnaires"),
    ("D003430", "Cross-Sectional Studies"),
    ("D015331", "Cohort Studies"),
    ("D016022", "Case-Control Studies"),
    ("D009369", "Neoplasms"),
    ("D006973", "Hypertension"),
    ("D003924", "Diabetes Mellitus, Type 2"),
    ("D003920", "Diabetes Mellitus"),
    ("D009765", "Obesity"),
    ("D001943", "Breast Neoplasms"),
    ("D008175", "Lung Neoplasms"),
    ("D015179", "Colorectal Neoplasms"),
    ("D011471", "Prostatic Neoplasms"),
    ("D008113", "Liver Neoplasms"),
    ("D008545", "Melanoma"),
    ("D007938", "Leukemia"),
    ("D008223", "Lymphoma"),
    ("D007249", "Inflammation"),
    ("D003324", "Coronary Artery Disease"),
    ("D009203", "Myocardial Infarction"),
    ("D006331", "Heart Diseases"),
    ("D020521", "Stroke"),
    ("D007676", "Kidney Failure, Chronic"),
    ("D001249", "Asthma"),
    ("D000544", "Alzheimer Disease"),
    ("D010300", "Parkinson Disease"),
    ("D003865", "Depressive Disorder, Major"),
    ("D001714", "Bipolar Disorder"),
    ("D012559", "Schizophrenia"),
    ("D015658", "HIV Infections"),
    ("D014376", "Tuberculosis"),
    ("D008288", "Malaria"),
    ("D000086382", "COVID-19"),
    ("D001424", "Bacterial Infections"),
    ("D014777", "Virus Diseases"),
    ("D000900", "Anti-Bacterial Agents"),
    ("D000970", "Antineoplastic Agents"),
    ("D007328", "Insulin"),
    ("D002784", "Cholesterol"),
    ("D004791", "Enzyme Inhibitors"),
    ("D014157", "Transcription Factors"),
    ("D008407", "Mast Cells"),
    ("D009169", "Mycobacterium tuberculosis"),
    ("D008168", "Lung"),
    ("D009474", "Neurons"),
    ("D007031", "Hypothalamus"),
    ("D004195", "Disease Models, Animal"),
    ("D008810", "Mice, Inbred C57BL"),
    ("D018450", "Disease Progression"),
    ("D006304", "Health Status"),
    ("D000073116", "Cancer Survivors"),
    ("D016015", "Logistic Models"),
    ("D017677", "Age Distribution"),
)

# topical qualifiers (UI, name) as NLM spells them
QUALIFIERS: tuple[tuple[str, str], ...] = (
    ("Q000097", "blood"),
    ("Q000150", "complications"),
    ("Q000175", "diagnosis"),
    ("Q000188", "drug therapy"),
    ("Q000209", "etiology"),
    ("Q000235", "genetics"),
    ("Q000276", "immunology"),
    ("Q000378", "metabolism"),
    ("Q000401", "mortality"),
    ("Q000453", "epidemiology"),
    ("Q000473", "pathology"),
    ("Q000503", "physiopathology"),
    ("Q000517", "prevention & control"),
    ("Q000601", "surgery"),
    ("Q000628", "therapy"),
)

# (registry number, substance UI, name); NLM writes registry number "0" when it has none
CHEMICALS: tuple[tuple[str, str, str], ...] = (
    ("0", "D015415", "Biomarkers"),
    ("0", "D000900", "Anti-Bacterial Agents"),
    ("0", "D000970", "Antineoplastic Agents"),
    ("0", "D007328", "Insulin"),
    ("0", "D002784", "Cholesterol"),
    ("0", "D014157", "Transcription Factors"),
    ("0", "D004791", "Enzyme Inhibitors"),
)

JOURNAL_ARTICLE = ("D016428", "Journal Article")
REVIEW = ("D016454", "Review")
RANDOMIZED_TRIAL = ("D016449", "Randomized Controlled Trial")
RETRACTION_NOTICE = ("D016440", "Retraction Notice")
RETRACTED_PUBLICATION = ("D016441", "Retracted Publication")

FIRST_PMID = 30_000_001
_DESCRIPTOR_UI = re.compile(r"^D\d{6,9}$")

_JOURNALS = (
    "BMC medicine",
    "PloS one",
    "The Lancet",
    "Journal of clinical investigation",
    "Scientific reports",
    "Nature communications",
    "American journal of epidemiology",
    "Clinical infectious diseases",
)
_DESIGNS = (
    "a cohort study",
    "a randomized controlled trial",
    "a cross-sectional survey",
    "a case-control study",
    "a systematic review",
    "an experimental study",
)
_VERBS = ("is associated with", "predicts", "modifies", "does not affect", "reduces", "increases")
_OUTCOMES = (
    "mortality",
    "hospital admission",
    "disease progression",
    "treatment response",
    "quality of life",
    "inflammatory markers",
)
_POPULATIONS = (
    "adults",
    "children",
    "older patients",
    "mice",
    "pregnant women",
    "a national registry",
)


def write_synthetic_release(
    out_dir: str | Path,
    n_records: int,
    *,
    release: int = 26,
    n_baseline_files: int,
    n_update_files: int,
    mesh_vocabulary: list[tuple[str, str]] | None = None,
    seed: int = 0,
    pmid_step: tuple[int, int] = (1, 3),
) -> list[Path]:
    """Write a synthetic release of ``n_records`` distinct articles (plus one retraction notice
    per retracted article) and return the ``.xml.gz`` paths in file order: baseline, then
    updates. About a tenth of the articles first appear in the update files when there are
    any; the rest are spread evenly over the baseline files. Consecutive PMIDs are apart by
    a number drawn from ``pmid_step`` (inclusive; wider steps spread a small release over
    more PMID buckets of the corpus)."""
    if n_baseline_files < 1 or n_update_files < 0:
        raise ValueError("need at least one baseline file and a non-negative update file count")
    if n_records < n_baseline_files:
        raise ValueError(f"{n_records} records cannot fill {n_baseline_files} baseline files")
    if not 0 <= release <= 99:
        raise ValueError(f"release must be a two-digit year, got {release}")
    vocabulary = list(mesh_vocabulary) if mesh_vocabulary else list(DEFAULT_MESH_VOCABULARY)
    bad = [ui for ui, _ in vocabulary if not _DESCRIPTOR_UI.match(ui)]
    if bad:
        raise ValueError(f"mesh_vocabulary has UIs that are not descriptor UIs: {bad[:5]}")

    writer = _ReleaseWriter(Path(out_dir), release, vocabulary, seed, n_records)
    writer.pmid_step = pmid_step
    n_update_new = min(n_records // 10, n_records - n_baseline_files) if n_update_files else 0
    n_baseline = n_records - n_update_new
    paths = []
    bounds = _split(n_baseline, n_baseline_files)
    for number, (start, stop) in enumerate(bounds, start=1):
        paths.append(writer.write_baseline_file(number, start, stop))
    update_bounds = _split(n_update_new, n_update_files) if n_update_files else []
    for offset, (start, stop) in enumerate(update_bounds):
        number = n_baseline_files + 1 + offset
        paths.append(
            writer.write_update_file(
                number, n_baseline + start, n_baseline + stop, offset, n_update_files
            )
        )
    return paths


def by_popularity(vocabulary: list[tuple[str, str]], rng: random.Random) -> list[tuple[str, str]]:
    """Order a vocabulary for Zipf sampling: the check tags and common topics of the default
    vocabulary first (Humans, Female, ...), then the rest in a seeded random order, so a full
    MeSH table does not make Calcimycin (D000001) the most used heading."""
    rank = {ui: i for i, (ui, _) in enumerate(DEFAULT_MESH_VOCABULARY)}
    known = sorted((pair for pair in vocabulary if pair[0] in rank), key=lambda p: rank[p[0]])
    rest = [pair for pair in vocabulary if pair[0] not in rank]
    rng.shuffle(rest)
    return known + rest


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    return [(n * i // parts, n * (i + 1) // parts) for i in range(parts)]


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass
class _Article:
    pmid: int
    version: int
    year: int
    title: str
    abstract_xml: str
    journal: str
    headings: list[tuple[int, bool, list[tuple[int, bool]]]]
    pubtypes: list[tuple[str, str]]
    references: list[int]
    chemicals: list[int] = field(default_factory=list)
    corrections: list[tuple[str, int]] = field(default_factory=list)


class _ReleaseWriter:
    def __init__(
        self,
        out_dir: Path,
        release: int,
        vocabulary: list[tuple[str, str]],
        seed: int,
        n_records: int,
    ) -> None:
        self.out_dir = out_dir
        self.release = release
        self.rng = random.Random(seed)
        vocabulary = by_popularity(vocabulary, self.rng)
        self.ui = [ui for ui, _ in vocabulary]
        self.name = [_escape(name) for _, name in vocabulary]
        self.plain_name = [name for _, name in vocabulary]
        # Zipf-like popularity: a few headings (Humans, Female) on most records, a long tail
        self.cum_weights = list(accumulate(1.0 / (rank + 1) for rank in range(len(vocabulary))))
        self.qualifiers = [(ui, _escape(name)) for ui, name in QUALIFIERS]
        self.n_records = n_records
        self.pmids: list[int] = []
        # one entry per article plus one per citation it received: uniform draws from it pick
        # a target with probability proportional to in-degree + 1 (preferential attachment)
        self.attachment: list[int] = []
        self.kept: dict[int, _Article] = {}
        self.baseline_pmids: list[int] = []
        self.retracted: set[int] = set()
        self.update_candidates: list[int] | None = None
        self.next_pmid = FIRST_PMID
        self.pmid_step = (1, 3)

    # --- records -------------------------------------------------------------------------

    def new_article(self, index: int) -> _Article:
        rng = self.rng
        pmid = self.next_pmid
        self.next_pmid += rng.randint(*self.pmid_step)
        n_headings = min(rng.randint(3, 12), len(self.ui))
        picked: dict[int, None] = {}
        while len(picked) < n_headings:
            draws = rng.choices(range(len(self.ui)), cum_weights=self.cum_weights, k=n_headings)
            picked.update(dict.fromkeys(draws))
        chosen = list(picked)[:n_headings]
        headings = []
        for position, d in enumerate(chosen):
            qualifiers = []
            if rng.random() < 0.4:
                n_qualifiers = len(self.qualifiers)
                first = int(rng.random() * n_qualifiers)
                qualifiers.append((first, rng.random() < 0.2))
                if rng.random() < 0.4:
                    second = (first + 1 + int(rng.random() * (n_qualifiers - 1))) % n_qualifiers
                    qualifiers.append((second, False))
            major = position == 0 or rng.random() < 0.25
            headings.append((d, major, qualifiers))
        topic = self.plain_name[chosen[0]]
        other = self.plain_name[chosen[-1]]
        outcome = rng.choice(_OUTCOMES)
        population = rng.choice(_POPULATIONS)
        design = rng.choice(_DESIGNS)
        title = _escape(
            f"{topic} {rng.choice(_VERBS)} {outcome} in {population} with {other.lower()}: "
            f"{design}."
        )
        n_patients = rng.randint(12, 50_000)
        sections = (
            (
                "BACKGROUND",
                f"The role of {topic.lower()} in {outcome} among {population} is unclear.",
            ),
            (
                "METHODS",
                f"We conducted {design} of {n_patients} participants with {other.lower()}.",
            ),
            (
                "RESULTS",
                f"{topic} was linked to {outcome} (odds ratio {rng.uniform(0.4, 3.0):.2f}, "
                f"95% CI {rng.uniform(0.2, 0.9):.2f}-{rng.uniform(1.1, 4.0):.2f}).",
            ),
            ("CONCLUSIONS", f"{topic} should be considered when managing {other.lower()}."),
        )
        if rng.random() < 0.5:
            abstract_xml = "".join(
                f'<AbstractText Label="{label}" NlmCategory="{label}">{_escape(text)}</AbstractText>'
                for label, text in sections
            )
        elif rng.random() < 0.9:
            abstract_xml = (
                f"<AbstractText>{_escape(' '.join(t for _, t in sections))}</AbstractText>"
            )
        else:
            abstract_xml = ""
        pubtypes = [JOURNAL_ARTICLE]
        draw = rng.random()
        if draw < 0.1:
            pubtypes.append(REVIEW)
        elif draw < 0.15:
            pubtypes.append(RANDOMIZED_TRIAL)
        references: list[int] = []
        if self.attachment and rng.random() < 0.75:
            wanted = min(len(self.pmids), 200, int(rng.paretovariate(1.5) * 6))
            if wanted:
                references = list(dict.fromkeys(rng.choices(self.attachment, k=wanted)))
        chemicals = [int(rng.random() * len(CHEMICALS))] if rng.random() < 0.2 else []
        article = _Article(
            chemicals=chemicals,
            pmid=pmid,
            version=1,
            year=1975 + 50 * index // max(self.n_records, 1),
            title=title,
            abstract_xml=abstract_xml,
            journal=rng.choice(_JOURNALS),
            headings=headings,
            pubtypes=pubtypes,
            references=references,
        )
        self.pmids.append(pmid)
        self.attachment.append(pmid)
        self.attachment.extend(references)
        return article

    def render(self, a: _Article) -> str:
        mesh = []
        for d, major, qualifiers in a.headings:
            parts = [
                f'<DescriptorName UI="{self.ui[d]}" MajorTopicYN="{"Y" if major else "N"}">'
                f"{self.name[d]}</DescriptorName>"
            ]
            for q, q_major in qualifiers:
                ui, name = self.qualifiers[q]
                parts.append(
                    f'<QualifierName UI="{ui}" MajorTopicYN="{"Y" if q_major else "N"}">'
                    f"{name}</QualifierName>"
                )
            mesh.append(f"<MeshHeading>{''.join(parts)}</MeshHeading>")
        pubtypes = "".join(
            f'<PublicationType UI="{ui}">{name}</PublicationType>' for ui, name in a.pubtypes
        )
        corrections = ""
        if a.corrections:
            corrections = (
                "<CommentsCorrectionsList>"
                + "".join(
                    f'<CommentsCorrections RefType="{ref_type}"><RefSource>Synthetic. '
                    f'{a.year}.</RefSource><PMID Version="1">{ref}</PMID></CommentsCorrections>'
                    for ref_type, ref in a.corrections
                )
                + "</CommentsCorrectionsList>"
            )
        references = ""
        if a.references:
            references = (
                "<ReferenceList>"
                + "".join(
                    f"<Reference><Citation>Synthetic reference {ref}.</Citation><ArticleIdList>"
                    f'<ArticleId IdType="pubmed">{ref}</ArticleId></ArticleIdList></Reference>'
                    for ref in a.references
                )
                + "</ReferenceList>"
            )
        abstract = f"<Abstract>{a.abstract_xml}</Abstract>" if a.abstract_xml else ""
        chemicals = ""
        if a.chemicals:
            chemicals = (
                "<ChemicalList>"
                + "".join(
                    f"<Chemical><RegistryNumber>{CHEMICALS[c][0]}</RegistryNumber>"
                    f'<NameOfSubstance UI="{CHEMICALS[c][1]}">{CHEMICALS[c][2]}'
                    "</NameOfSubstance></Chemical>"
                    for c in a.chemicals
                )
                + "</ChemicalList>"
            )
        return (
            f'<PubmedArticle><MedlineCitation Status="MEDLINE" Owner="NLM">'
            f'<PMID Version="{a.version}">{a.pmid}</PMID>'
            f'<Article PubModel="Print"><Journal><JournalIssue CitedMedium="Internet">'
            f"<PubDate><Year>{a.year}</Year></PubDate></JournalIssue>"
            f"<Title>{a.journal}</Title></Journal><ArticleTitle>{a.title}</ArticleTitle>"
            f"{abstract}<Language>eng</Language>"
            f"<PublicationTypeList>{pubtypes}</PublicationTypeList></Article>"
            f"{chemicals}<CitationSubset>IM</CitationSubset>{corrections}"
            f"<MeshHeadingList>{''.join(mesh)}</MeshHeadingList></MedlineCitation>"
            f"<PubmedData><PublicationStatus>ppublish</PublicationStatus><ArticleIdList>"
            f'<ArticleId IdType="pubmed">{a.pmid}</ArticleId></ArticleIdList>'
            f"{references}</PubmedData></PubmedArticle>"
        )

    # --- files ---------------------------------------------------------------------------

    def write_baseline_file(self, number: int, start: int, stop: int) -> Path:
        records = []
        for index in range(start, stop):
            article = self.new_article(index)
            self.baseline_pmids.append(article.pmid)
            # keep a small sample for the update files to revise, version or retract
            if self.rng.random() < 0.05:
                self.kept[article.pmid] = article
            records.append(self.render(article))
        return self._write("baseline", number, records, [])

    def write_update_file(
        self, number: int, start: int, stop: int, offset: int, n_update_files: int
    ) -> Path:
        rng = self.rng
        records = [self.render(self.new_article(index)) for index in range(start, stop)]
        if self.update_candidates is None:
            # fixed once, so each kept record is handled by exactly one update file
            self.update_candidates = sorted(self.kept)
        share = self.update_candidates[offset::n_update_files]
        rng.shuffle(share)
        # of this file's share of kept baseline records: about a quarter revised, a tenth given
        # a Version 2, a tenth retracted (with a notice), a tenth deleted
        n = len(share)
        revised = share[: n // 4]
        versioned = share[n // 4 : n // 4 + max(1, n // 10)]
        retracted = share[n // 4 + max(1, n // 10) : n // 4 + 2 * max(1, n // 10)]
        deleted = share[n // 4 + 2 * max(1, n // 10) : n // 4 + 3 * max(1, n // 10)]
        for pmid in revised:
            article = self.kept[pmid]
            extra = rng.randrange(len(self.ui))
            if all(d != extra for d, _, _ in article.headings):
                article.headings.append((extra, False, []))
            records.append(self.render(article))
        for pmid in versioned:
            article = self.kept[pmid]
            records.append(
                self.render(
                    _Article(
                        pmid=pmid,
                        version=2,
                        year=article.year,
                        title=article.title,
                        abstract_xml=article.abstract_xml,
                        journal=article.journal,
                        headings=article.headings,
                        pubtypes=article.pubtypes,
                        references=article.references,
                        chemicals=article.chemicals,
                    )
                )
            )
        for pmid in retracted:
            article = self.kept[pmid]
            notice = self.new_article(stop)
            notice.title = f"Retraction: {article.title}"
            notice.abstract_xml = ""
            notice.pubtypes = [JOURNAL_ARTICLE, RETRACTION_NOTICE]
            notice.references = []
            notice.corrections = [("RetractionOf", pmid)]
            records.append(self.render(notice))
            article.pubtypes = [*article.pubtypes, RETRACTED_PUBLICATION]
            article.corrections = [*article.corrections, ("RetractionIn", notice.pmid)]
            records.append(self.render(article))
            self.retracted.add(pmid)
        for pmid in deleted:
            del self.kept[pmid]
        return self._write("updatefiles", number, records, sorted(deleted))

    def _write(self, folder: str, number: int, records: list[str], deleted: list[int]) -> Path:
        directory = self.out_dir / folder
        directory.mkdir(parents=True, exist_ok=True)
        name = f"pubmed{self.release:02d}n{number:04d}.xml.gz"
        body = [
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<!DOCTYPE PubmedArticleSet PUBLIC "-//NLM//DTD PubMedArticle, 1st January 2025//EN"'
            ' "https://dtd.nlm.nih.gov/ncbi/pubmed/out/pubmed_250101.dtd">\n<PubmedArticleSet>\n',
            "\n".join(records),
        ]
        if deleted:
            body.append(
                "\n<DeleteCitation>"
                + "".join(f'<PMID Version="1">{pmid}</PMID>' for pmid in deleted)
                + "</DeleteCitation>"
            )
        body.append("\n</PubmedArticleSet>\n")
        data = gzip.compress("".join(body).encode("utf-8"), compresslevel=3, mtime=0)
        path = directory / name
        # temporary name then rename, so a reader never sees half a file
        tmp = directory / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, path)
        digest = hashlib.md5(data).hexdigest()
        md5_tmp = directory / f".{name}.md5.tmp"
        md5_tmp.write_text(f"MD5({name})= {digest}\n")
        os.replace(md5_tmp, directory / f"{name}.md5")
        return path
