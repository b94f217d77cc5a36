/* The recount's byte scan of a block of records, compiled (kg_platform/pubmed/recount.py).
 *
 * It shares nothing with the parse (_reader.c): it only finds tags by their bytes, as the
 * recount's Python scan does, and counts what that scan counts, in one pass over the block
 * instead of one pass per tag. recount.py uses it when it imports and keeps its own scan
 * otherwise; test_recount checks that both give the same counts.
 *
 * scan(data, end_tag, last) -> (records, mesh_headings, pubmed_references) or None
 *
 * ``last`` is where the block's last record end tag ``end_tag`` starts. The block holds only
 * records when neither ``</PubmedBookArticle>`` nor ``</DeleteCitation>`` occurs anywhere
 * in ``data``; otherwise the answer is None (the caller counts it one unit at a time).
 * Otherwise, over ``data[:last + len(end_tag)]``:
 *   - records: occurrences of ``end_tag``;
 *   - mesh_headings: occurrences of ``<MeshHeading>`` and ``<MeshHeading `` before ``last``;
 *   - pubmed_references: per record holding ``<ReferenceList`` (before ``last``), the
 *     distinct ids matched by the pattern
 *     ``<ArticleId\s+IdType\s*=\s*["']pubmed["']\s*>\s*0*([1-9][0-9]*)\s*</ArticleId>``
 *     from that first ``<ReferenceList`` to the record's last ``</ReferenceList>`` (to the
 *     record's end tag when none follows it), summed over the records.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef struct {
    Py_ssize_t start; /* where the match's '<' is */
    Py_ssize_t end;   /* one past its '>' */
    const char *digits;
    Py_ssize_t length;
} Id;

typedef struct {
    Id *items;
    Py_ssize_t n, cap;
} Ids;

static int ids_push(Ids *ids, Id id) {
    if (ids->n == ids->cap) {
        Py_ssize_t cap = ids->cap ? ids->cap * 2 : 64;
        Id *grown = realloc(ids->items, (size_t)cap * sizeof(Id));
        if (grown == NULL) return -1;
        ids->items = grown;
        ids->cap = cap;
    }
    ids->items[ids->n++] = id;
    return 0;
}

static int is_space(char c) {
    /* \s of a bytes pattern */
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static int starts(const char *p, const char *end, const char *lit, size_t n) {
    return (size_t)(end - p) >= n && memcmp(p, lit, n) == 0;
}

/* The reference id pattern anchored at p (p[0] == '<'), within [p, end): its digits and
 * one past its end, or 0 when it does not match there. */
static int match_id(const char *p, const char *end, const char **digits, Py_ssize_t *length,
                    const char **after) {
    const char *q = p;
    if (!starts(q, end, "<ArticleId", 10)) return 0;
    q += 10;
    if (q >= end || !is_space(*q)) return 0;
    while (q < end && is_space(*q)) q++;
    if (!starts(q, end, "IdType", 6)) return 0;
    q += 6;
    while (q < end && is_space(*q)) q++;
    if (q >= end || *q != '=') return 0;
    q++;
    while (q < end && is_space(*q)) q++;
    if (q >= end || (*q != '"' && *q != '\'')) return 0;
    q++;
    if (!starts(q, end, "pubmed", 6)) return 0;
    q += 6;
    if (q >= end || (*q != '"' && *q != '\'')) return 0;
    q++;
    while (q < end && is_space(*q)) q++;
    if (q >= end || *q != '>') return 0;
    q++;
    while (q < end && is_space(*q)) q++;
    while (q < end && *q == '0') q++;
    if (q >= end || *q < '1' || *q > '9') return 0;
    const char *first = q;
    while (q < end && *q >= '0' && *q <= '9') q++;
    Py_ssize_t n = q - first;
    while (q < end && is_space(*q)) q++;
    if (!starts(q, end, "</ArticleId>", 12)) return 0;
    *digits = first;
    *length = n;
    *after = q + 12;
    return 1;
}

static int id_order(const void *a, const void *b) {
    const Id *x = a, *y = b;
    if (x->length != y->length) return x->length < y->length ? -1 : 1;
    return memcmp(x->digits, y->digits, (size_t)x->length);
}

/* The distinct ids of ids[0:n] that end at or before ``limit`` (sorts them in place). */
static Py_ssize_t distinct_ids(Id *ids, Py_ssize_t n, Py_ssize_t limit) {
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (ids[i].end <= limit) ids[kept++] = ids[i];
    if (kept < 2) return kept;
    qsort(ids, (size_t)kept, sizeof(Id), id_order);
    Py_ssize_t distinct = 1;
    for (Py_ssize_t i = 1; i < kept; i++)
        if (id_order(&ids[i - 1], &ids[i]) != 0) distinct++;
    return distinct;
}

/* Whether the tag starting at p[0] == '<' can be one the scan acts on, from its next two
 * bytes: "</P" (PubmedArticle, PubmedBookArticle), "</D" (DeleteCitation), "</R"
 * (ReferenceList), "</" + close (the third byte of the record end tag), "<Me"
 * (MeshHeading), "<Re" (ReferenceList), "<Ar" (ArticleId). Every other tag is skipped
 * unread: the scan below does nothing at it. */
static int wanted(const char *p, char close) {
    char a = p[1], b = p[2];
    if (a == '/') return b == 'P' || b == 'D' || b == 'R' || b == close;
    return ((a == 'M' || a == 'R') && b == 'e') || (a == 'A' && b == 'r');
}

/* The first p >= from, p + 2 < end, with p[0] == '<' and wanted(p): 16 bytes at a time
 * where SSE2 is there (every x86-64), else byte by byte; NULL when there is none. A tag
 * within two bytes of ``end`` is too short to be any the scan reads. */
static const char *next_wanted(const char *from, const char *end, char close) {
    const char *p = from;
#if defined(__SSE2__)
    const __m128i lt = _mm_set1_epi8('<'), slash = _mm_set1_epi8('/');
    const __m128i P = _mm_set1_epi8('P'), D = _mm_set1_epi8('D'), R = _mm_set1_epi8('R');
    const __m128i C = _mm_set1_epi8(close), M = _mm_set1_epi8('M'), A = _mm_set1_epi8('A');
    const __m128i e = _mm_set1_epi8('e'), r = _mm_set1_epi8('r');
    while (end - p >= 18) { /* the bytes p[0..17] */
        __m128i v0 = _mm_loadu_si128((const __m128i *)p);
        __m128i open = _mm_cmpeq_epi8(v0, lt);
        if (_mm_movemask_epi8(open) == 0) {
            p += 16;
            continue;
        }
        __m128i v1 = _mm_loadu_si128((const __m128i *)(p + 1));
        __m128i v2 = _mm_loadu_si128((const __m128i *)(p + 2));
        __m128i closing = _mm_and_si128(
            _mm_cmpeq_epi8(v1, slash),
            _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v2, P), _mm_cmpeq_epi8(v2, D)),
                         _mm_or_si128(_mm_cmpeq_epi8(v2, R), _mm_cmpeq_epi8(v2, C))));
        __m128i opening = _mm_or_si128(
            _mm_and_si128(_mm_or_si128(_mm_cmpeq_epi8(v1, M), _mm_cmpeq_epi8(v1, R)),
                          _mm_cmpeq_epi8(v2, e)),
            _mm_and_si128(_mm_cmpeq_epi8(v1, A), _mm_cmpeq_epi8(v2, r)));
        int bits = _mm_movemask_epi8(_mm_and_si128(open, _mm_or_si128(closing, opening)));
        if (bits) return p + __builtin_ctz((unsigned)bits);
        p += 16;
    }
#endif
    for (; end - p > 2; p++)
        if (*p == '<' && wanted(p, close)) return p;
    return NULL;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer data, tag;
    Py_ssize_t last;
    if (!PyArg_ParseTuple(args, "y*y*n", &data, &tag, &last)) return NULL;
    const char *base = data.buf;
    const char *end = base + data.len;
    const char *end_tag = tag.buf;
    size_t tag_len = (size_t)tag.len;
    PyObject *result = NULL;
    Ids ids = {NULL, 0, 0};
    long long records = 0, headings = 0, references = 0;
    Py_ssize_t list_first = -1, list_close = -1;

    if (last < 0 || last + tag.len > data.len || tag_len < 3 || end_tag[0] != '<') {
        PyErr_SetString(PyExc_ValueError, "scan: last must be where end_tag starts in data");
        goto done;
    }
    const char *done_at = base + last + tag.len; /* the counts cover data[:done] */
    const char *before_last = base + last;

    Py_BEGIN_ALLOW_THREADS;
    const char *p = base;
    const char close = end_tag[2];
    while ((p = next_wanted(p, end, close)) != NULL) {
        char next = p[1];
        if (next == '/') {
            if (starts(p, end, "</PubmedBookArticle>", 20) ||
                starts(p, end, "</DeleteCitation>", 17)) {
                records = -1; /* not a block of records only */
                break;
            }
            if (p < done_at && starts(p, done_at, end_tag, tag_len)) {
                records++;
                if (list_first >= 0) {
                    Py_ssize_t at = p - base;
                    Py_ssize_t limit = list_close > list_first ? list_close : at;
                    references += distinct_ids(ids.items, ids.n, limit);
                }
                list_first = list_close = -1;
                ids.n = 0;
                p += tag_len;
                continue;
            }
            if (list_first >= 0 && p < before_last &&
                starts(p, before_last, "</ReferenceList>", 16)) {
                list_close = p - base;
            }
        } else if (p < before_last) {
            if (next == 'M' && (starts(p, before_last, "<MeshHeading>", 13) ||
                                starts(p, before_last, "<MeshHeading ", 13))) {
                headings++;
            } else if (next == 'R' && list_first < 0 &&
                       starts(p, before_last, "<ReferenceList", 14)) {
                list_first = p - base;
            } else if (next == 'A' && list_first >= 0) {
                const char *digits, *after;
                Py_ssize_t length;
                /* a match ends by the record's end tag at the latest */
                if (match_id(p, done_at, &digits, &length, &after)) {
                    Id id = {p - base, after - base, digits, length};
                    if (ids_push(&ids, id) < 0) {
                        records = -2;
                        break;
                    }
                    p = after;
                    continue;
                }
            }
        }
        p++;
    }
    Py_END_ALLOW_THREADS;

    if (records == -2) {
        PyErr_NoMemory();
    } else if (records < 0) {
        result = Py_NewRef(Py_None);
    } else {
        result = Py_BuildValue("(LLL)", records, headings, references);
    }
done:
    free(ids.items);
    PyBuffer_Release(&data);
    PyBuffer_Release(&tag);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, end_tag, last) -> (records, mesh_headings, pubmed_references) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_recount", "The recount's compiled byte scan.", -1, methods, NULL, NULL,
    NULL, NULL,
};

PyMODINIT_FUNC PyInit__recount(void) { return PyModule_Create(&module); }
