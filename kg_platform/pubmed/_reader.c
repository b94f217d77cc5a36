/*
 * _reader.c: the compiled byte-level reader behind kg_platform.pubmed._fast.
 *
 * It walks the decompressed bytes of a PubmedArticleSet one record at a time, checks each
 * record for well-formedness itself (libxml2 no longer reads the bytes on this path) and
 * reads the fields that the lxml path (columns.py, Columns.add_record) reads, with the same
 * rules. It accepts a record only when it is sure to give exactly what lxml gives; for
 * anything else it declines, and the Python side hands that record's bytes to lxml. So the
 * reader never has to be complete, only right about what it accepts:
 *
 *   - markup: elements and attributes with ASCII names; a namespace prefix only where it is
 *     declared ("xmlns:mml" for MathML), never a default namespace, whose elements lxml would
 *     name differently; comments, CDATA, processing instructions and DOCTYPEs inside a record
 *     are declined;
 *   - text: valid UTF-8 of XML characters (tab and newline the only controls; a carriage
 *     return is declined), the five predefined entities and character references; any
 *     other entity, an unterminated reference or "]]>" in text is declined;
 *   - structure: end tags match, attributes are separated, quoted and unique, depth <= 128;
 *   - the lxml path's own ways: a record inside a record (read there as two), a field inside
 *     a subtree it cuts from the bytes unread (AuthorList, History, ...), a field element
 *     inside another of its kind (read there in start-tag order), a PMID that is missing,
 *     not numeric or not MedlineCitation's child, are all declined.
 *
 * Fields follow Columns.add_record: the text of an element is all the text inside it,
 * stripped as str.strip() strips; the first PMID is the record's; the last ArticleTitle,
 * Title and PubDate win, the first Language with text; AbstractText sections before any
 * OtherAbstract; rows of MeshHeading, Chemical, CommentsCorrections and PublicationType in
 * document order; ArticleId IdType="pubmed" under PubmedData/ReferenceList, each once.
 *
 * A record is read into C buffers first and only turned into Python objects once accepted,
 * so a declined record leaves nothing behind. Accepted rows are appended straight onto the
 * column lists of columns.Columns (see Columns.row_lists for their order).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* what one record read gives */
enum { R_ACCEPT, R_DECLINE, R_MORE, R_NOMEM };

/* what scan() tells the caller, with the position it stopped at */
enum {
    ST_MORE = 0,       /* the buffer ends inside (or before) the next record: read more */
    ST_LIMIT = 1,      /* `limit` articles accepted: flush, then call again */
    ST_DECLINED = 2,   /* the record at pos..decline_end goes to lxml */
    ST_END = 3,        /* </PubmedArticleSet> read; pos is after it */
    ST_NOT_SIMPLE = 4, /* something other than a record between records: the whole file to lxml */
};

#define MAX_DEPTH 128
#define MAX_ATTRS 16
#define MAX_NAME 256
/* libxml2 refuses text nodes over 10 MB without huge_tree; stay well below */
#define MAX_RECORD_BYTES (4u << 20)

/* ------------------------------------------------------------------ byte classes */

/* bytes that text may hold as they are (no reference, no markup, nothing to check) */
static unsigned char TEXT_PLAIN[256];
/* the same inside an attribute value: quotes end it, tab and newline become spaces */
static unsigned char ATTR_PLAIN[256];
static unsigned char NAME_START[256];
static unsigned char NAME_CHAR[256];

static void init_classes(void)
{
    for (int c = 0; c < 256; c++) {
        int printable = c >= 0x20 && c < 0x80;
        TEXT_PLAIN[c] = (printable || c == '\t' || c == '\n') && c != '<' && c != '&' && c != '>';
        ATTR_PLAIN[c] = printable && c != '<' && c != '&' && c != '"' && c != '\'';
        /* ASCII names only; a prefix's ':' is read by qname() */
        NAME_START[c] = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
        NAME_CHAR[c] = NAME_START[c] || (c >= '0' && c <= '9') || c == '-' || c == '.';
    }
}

static inline int is_xml_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n';
}

/* ------------------------------------------------------------------ growable buffers */

typedef struct {
    char *data;
    size_t len, cap;
} Bytes;

static int bytes_reserve(Bytes *b, size_t extra)
{
    if (b->len + extra <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    char *data = PyMem_Realloc(b->data, cap);
    if (data == NULL)
        return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int bytes_put(Bytes *b, const void *p, size_t n)
{
    if (bytes_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

/* A typed growable array: VEC(T) name; vec_push(&name, value) */
#define VEC(T) struct { T *items; size_t len, cap; }
#define vec_push(v, value)                                                                   \
    (((v)->len < (v)->cap || vec_grow((void **)&(v)->items, &(v)->cap, sizeof(*(v)->items)) == 0) \
         ? ((v)->items[(v)->len++] = (value), 0)                                             \
         : -1)

static int vec_grow(void **items, size_t *cap, size_t size)
{
    size_t n = *cap ? *cap * 2 : 16;
    void *grown = PyMem_Realloc(*items, n * size);
    if (grown == NULL)
        return -1;
    *items = grown;
    *cap = n;
    return 0;
}

/* ------------------------------------------------------------------ record state */

/* A piece of decoded text in one of the record's buffers; off == NONE means null (None). */
#define NONE ((size_t)-1)
typedef struct {
    size_t off, len;
} Span;
static const Span NULL_SPAN = {NONE, 0};

typedef struct { Span label, text; } Section;       /* label in attrs, text in text */
typedef struct { Span ui, name; } PubType;          /* ui in attrs, name in text */
typedef struct { Span descriptor; int major; Span qualifier; int qualifier_major; } Heading;
typedef struct { Span registry, ui, name; } ChemicalRow; /* ui in attrs, others in text */
typedef struct { Span ref_type; long long ref_pmid; } Correction; /* ref_pmid -1: None */

/* the tags the reader looks at; every other name is T_OTHER */
enum {
    T_OTHER, T_PubmedArticle, T_PubmedBookArticle, T_DeleteCitation, T_MedlineCitation,
    T_PubmedData, T_ReferenceList, T_ArticleId, T_PMID, T_ArticleTitle, T_Title,
    T_AbstractText, T_OtherAbstract, T_Language, T_PubDate, T_Year, T_MedlineDate,
    T_PublicationType, T_MeshHeading, T_DescriptorName, T_QualifierName, T_Chemical,
    T_RegistryNumber, T_NameOfSubstance, T_CommentsCorrections,
    /* the subtrees the lxml path cuts from the bytes unread (parse._UNREAD_SUBTREES) */
    T_AuthorList, T_InvestigatorList, T_History, T_GrantList, T_KeywordList, T_COUNT
};
#define FIRST_UNREAD T_AuthorList

static const char *const TAG_NAMES[T_COUNT] = {
    "", "PubmedArticle", "PubmedBookArticle", "DeleteCitation", "MedlineCitation",
    "PubmedData", "ReferenceList", "ArticleId", "PMID", "ArticleTitle", "Title",
    "AbstractText", "OtherAbstract", "Language", "PubDate", "Year", "MedlineDate",
    "PublicationType", "MeshHeading", "DescriptorName", "QualifierName", "Chemical",
    "RegistryNumber", "NameOfSubstance", "CommentsCorrections",
    "AuthorList", "InvestigatorList", "History", "GrantList", "KeywordList",
};
/* the tags by name length, so that a name is compared with at most four of them */
#define MAX_TAG_LENGTH 24
static unsigned char TAGS_OF_LENGTH[MAX_TAG_LENGTH][8];
static int N_TAGS_OF_LENGTH[MAX_TAG_LENGTH];

static void init_tags(void)
{
    memset(N_TAGS_OF_LENGTH, 0, sizeof(N_TAGS_OF_LENGTH));
    for (int t = 1; t < T_COUNT; t++) {
        size_t len = strlen(TAG_NAMES[t]);
        TAGS_OF_LENGTH[len][N_TAGS_OF_LENGTH[len]++] = (unsigned char)t;
    }
}

static int tag_of(const unsigned char *name, size_t len)
{
    if (len >= MAX_TAG_LENGTH)
        return T_OTHER;
    for (int i = 0; i < N_TAGS_OF_LENGTH[len]; i++) {
        int t = TAGS_OF_LENGTH[len][i];
        if (memcmp(TAG_NAMES[t], name, len) == 0)
            return t;
    }
    return T_OTHER;
}

/* What an open element is to the record: decides what happens at its end tag. */
enum {
    ROLE_NONE, ROLE_CITATION, ROLE_OWN_PMID, ROLE_CORRECTION_PMID, ROLE_ARTICLE_TITLE,
    ROLE_JOURNAL_TITLE, ROLE_ABSTRACT_TEXT, ROLE_LANGUAGE, ROLE_PUBDATE, ROLE_YEAR,
    ROLE_MEDLINE_DATE, ROLE_PUBTYPE, ROLE_HEADING, ROLE_CHEMICAL, ROLE_REGISTRY,
    ROLE_SUBSTANCE, ROLE_CORRECTION, ROLE_PUBMED_DATA, ROLE_REFERENCE_LIST, ROLE_REFERENCE_ID,
    ROLE_DELETED_PMID, ROLE_COUNT
};

/* roles whose element inside another of the same role would be read in a different order
 * here (at end tags) than by lxml (at start tags): such a record is declined */
static const unsigned char NO_NESTING[ROLE_COUNT] = {
    [ROLE_ARTICLE_TITLE] = 1, [ROLE_JOURNAL_TITLE] = 1, [ROLE_ABSTRACT_TEXT] = 1,
    [ROLE_LANGUAGE] = 1, [ROLE_PUBDATE] = 1, [ROLE_PUBTYPE] = 1, [ROLE_HEADING] = 1,
    [ROLE_CHEMICAL] = 1, [ROLE_CORRECTION] = 1,
};

typedef struct {
    const unsigned char *name;
    size_t name_len;
    int tag;
    int role;
    int leaf;         /* lxml reads only its leading text (.text): no child element allowed */
    size_t text_off;  /* where its text starts in the record's text buffer */
    int skip;         /* an AbstractText after an OtherAbstract */
    Span attr;        /* the one attribute it needs (Version, Label, UI, RefType) */
} Open;

typedef struct {
    const unsigned char *name, *value;
    size_t name_len, value_len, prefix_len;
} Attr;

/* a namespace declaration in scope: xmlns:prefix="uri" on the element at `depth` */
typedef struct {
    const unsigned char *prefix, *uri;
    size_t prefix_len, uri_len;
    int depth;
} Namespace;
#define MAX_NS 32

enum { KIND_ARTICLE, KIND_BOOK, KIND_DELETION };

typedef struct {
    /* decoded text of the elements being read, and decoded attribute values */
    Bytes text, attrs, scratch;
    int collecting; /* open elements whose text is wanted */
    Open stack[MAX_DEPTH];
    int depth;
    int open_roles[ROLE_COUNT];
    int open_unread[T_COUNT]; /* open elements of each subtree the lxml path leaves unread */
    int in_unread;            /* how many of them are open */
    Namespace ns[MAX_NS];
    int n_ns;

    /* the record being read */
    int kind;
    int citation_seen, in_citation, pmid_seen, other_abstract;
    long long pmid, version;
    Span title, journal, language;
    long long year;         /* -1: None */
    long long date_year;    /* the open PubDate's year so far; -1: None */
    int date_part_seen;
    int heading_has_descriptor, heading_qualifiers;
    Span heading_ui;
    int heading_major;
    ChemicalRow chemical;
    Correction correction;
    int pubdate_at, heading_at, chemical_at, correction_at, pubmed_data_at, reference_list_at;

    VEC(Section) sections;
    VEC(PubType) pubtypes;
    VEC(Heading) headings;
    VEC(ChemicalRow) chemicals;
    VEC(Correction) corrections;
    VEC(long long) cited;
    VEC(long long) deleted;
    /* open-addressing set over `cited`, so each reference is kept once in first-seen order */
    long long *seen;
    size_t seen_cap, seen_used; /* allocated; in use for this record (0: not yet) */
} Reader;

static void record_reset(Reader *r, int kind)
{
    r->text.len = r->attrs.len = 0;
    r->collecting = 0;
    r->depth = 0;
    memset(r->open_roles, 0, sizeof(r->open_roles));
    memset(r->open_unread, 0, sizeof(r->open_unread));
    r->in_unread = 0;
    r->n_ns = 0;
    r->kind = kind;
    r->citation_seen = r->in_citation = r->pmid_seen = r->other_abstract = 0;
    r->pmid = -1;
    r->version = 1;
    r->title = r->journal = r->language = NULL_SPAN;
    r->year = -1;
    r->pubdate_at = r->heading_at = r->chemical_at = r->correction_at = -1;
    r->pubmed_data_at = r->reference_list_at = -1;
    r->sections.len = r->pubtypes.len = r->headings.len = 0;
    r->chemicals.len = r->corrections.len = r->cited.len = r->deleted.len = 0;
    r->seen_used = 0;
}

static void reader_free(Reader *r)
{
    PyMem_Free(r->text.data);
    PyMem_Free(r->attrs.data);
    PyMem_Free(r->scratch.data);
    PyMem_Free(r->sections.items);
    PyMem_Free(r->pubtypes.items);
    PyMem_Free(r->headings.items);
    PyMem_Free(r->chemicals.items);
    PyMem_Free(r->corrections.items);
    PyMem_Free(r->cited.items);
    PyMem_Free(r->deleted.items);
    PyMem_Free(r->seen);
}

/* ------------------------------------------------------------------ characters */

/* Python's str.isspace, which str.strip() uses (checked over all code points in the tests) */
static int is_python_space(uint32_t c)
{
    if (c < 0x80)
        return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20);
    return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
           c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

static int is_xml_char(uint32_t c)
{
    /* XML 1.0 Char, less the carriage return (lxml turns CR LF into LF) */
    if (c < 0x20)
        return c == 0x09 || c == 0x0a;
    return (c <= 0xd7ff) || (c >= 0xe000 && c <= 0xfffd) || (c >= 0x10000 && c <= 0x10ffff);
}

/* Length of the UTF-8 sequence at p (0: invalid, -1: cut by the end of the buffer), which
 * must encode an XML character in its shortest form. */
static int utf8_char(const unsigned char *p, const unsigned char *end, uint32_t *out)
{
    unsigned char c = p[0];
    int n;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0; /* a continuation byte, an overlong lead (C0, C1) or beyond U+10FFFF */
    }
    if (end - p < n)
        return -1;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || !is_xml_char(cp))
        return 0; /* overlong, or a surrogate, U+FFFE/U+FFFF, beyond U+10FFFF */
    *out = cp;
    return n;
}

static int utf8_put(Bytes *b, uint32_t cp)
{
    unsigned char s[4];
    int n;
    if (cp < 0x80) {
        s[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        s[0] = 0xc0 | (cp >> 6);
        s[1] = 0x80 | (cp & 0x3f);
        n = 2;
    } else if (cp < 0x10000) {
        s[0] = 0xe0 | (cp >> 12);
        s[1] = 0x80 | ((cp >> 6) & 0x3f);
        s[2] = 0x80 | (cp & 0x3f);
        n = 3;
    } else {
        s[0] = 0xf0 | (cp >> 18);
        s[1] = 0x80 | ((cp >> 12) & 0x3f);
        s[2] = 0x80 | ((cp >> 6) & 0x3f);
        s[3] = 0x80 | (cp & 0x3f);
        n = 4;
    }
    return bytes_put(b, s, n);
}

/* The reference after '&' at p: the predefined entities and character references only.
 * Sets *cp and *len (bytes from '&' to ';' inclusive). */
static int reference(const unsigned char *p, const unsigned char *end, uint32_t *cp, size_t *len)
{
    static const struct { const char *name; size_t len; uint32_t cp; } PREDEFINED[] = {
        {"lt;", 3, '<'}, {"gt;", 3, '>'}, {"amp;", 4, '&'}, {"quot;", 5, '"'}, {"apos;", 5, '\''},
    };
    const unsigned char *q = p + 1;
    if (q < end && *q == '#') {
        int hex = 0, digits = 0;
        uint32_t value = 0;
        q++;
        if (q < end && *q == 'x') {
            hex = 1;
            q++;
        }
        for (; q < end; q++) {
            unsigned char c = *q;
            uint32_t d;
            if (c >= '0' && c <= '9')
                d = c - '0';
            else if (hex && c >= 'a' && c <= 'f')
                d = c - 'a' + 10;
            else if (hex && c >= 'A' && c <= 'F')
                d = c - 'A' + 10;
            else
                break;
            if (++digits > 8)
                return R_DECLINE;
            value = value * (hex ? 16 : 10) + d;
        }
        if (q >= end)
            return R_MORE;
        if (*q != ';' || digits == 0 || !is_xml_char(value))
            return R_DECLINE;
        *cp = value;
        *len = (size_t)(q + 1 - p);
        return R_ACCEPT;
    }
    for (size_t i = 0; i < sizeof(PREDEFINED) / sizeof(PREDEFINED[0]); i++) {
        size_t n = PREDEFINED[i].len;
        size_t have = (size_t)(end - q);
        if (memcmp(q, PREDEFINED[i].name, have < n ? have : n) == 0) {
            if (have < n)
                return R_MORE;
            *cp = PREDEFINED[i].cp;
            *len = n + 1;
            return R_ACCEPT;
        }
    }
    return R_DECLINE;
}

/*
 * Checks the character data at *pp up to `stop` ('<' for text, the quote for an attribute
 * value) and, when `out` is given, appends it decoded. Leaves *pp at the stop byte.
 * Relies on the NUL that ends every Python bytes object to stop the fast loop at `end`.
 */
static int chars(const unsigned char **pp, const unsigned char *end, unsigned char stop,
                 Bytes *out)
{
    const int attr = stop != '<';
    const unsigned char *plain = attr ? ATTR_PLAIN : TEXT_PLAIN;
    const unsigned char *start = *pp, *p = *pp, *run = p;
    for (;;) {
        while (plain[*p])
            p++;
        if (p >= end)
            return R_MORE;
        unsigned char c = *p;
        if (c == stop)
            break;
        if (c >= 0x80) {
            uint32_t cp;
            int n = utf8_char(p, end, &cp);
            if (n < 0)
                return R_MORE;
            if (n == 0)
                return R_DECLINE;
            p += n;
            continue;
        }
        if (c == '>') { /* only in text: "]]>" may not appear there */
            if (p - start >= 2 && p[-1] == ']' && p[-2] == ']')
                return R_DECLINE;
            p++;
            continue;
        }
        if (attr && (c == '"' || c == '\'')) { /* the other quote */
            p++;
            continue;
        }
        if (attr && (c == '\t' || c == '\n')) {
            /* attribute value normalisation: literal white space becomes a space */
            if (out && (bytes_put(out, run, p - run) < 0 || bytes_put(out, " ", 1) < 0))
                return R_NOMEM;
            run = ++p;
            continue;
        }
        if (c == '&') {
            uint32_t cp;
            size_t n;
            int got = reference(p, end, &cp, &n);
            if (got != R_ACCEPT)
                return got;
            if (out && (bytes_put(out, run, p - run) < 0 || utf8_put(out, cp) < 0))
                return R_NOMEM;
            p += n;
            run = p;
            continue;
        }
        /* '<' in an attribute value, a control character, a carriage return */
        return R_DECLINE;
    }
    if (out && bytes_put(out, run, p - run) < 0)
        return R_NOMEM;
    *pp = p;
    return R_ACCEPT;
}

/* ------------------------------------------------------------------ reading values */

/* The span without the white space str.strip() removes; NULL_SPAN when nothing is left
 * (the `text or None` of the lxml path). */
static Span strip(const Bytes *b, size_t off, size_t len)
{
    const unsigned char *s = (const unsigned char *)b->data + off, *e = s + len;
    while (s < e) {
        uint32_t cp;
        int n = *s < 0x80 ? (cp = *s, 1) : utf8_char(s, e, &cp);
        if (n <= 0 || !is_python_space(cp))
            break;
        s += n;
    }
    while (e > s) {
        const unsigned char *c = e - 1;
        while (c > s && (*c & 0xc0) == 0x80)
            c--;
        uint32_t cp;
        int n = *c < 0x80 ? (cp = *c, 1) : utf8_char(c, e, &cp);
        if (n <= 0 || !is_python_space(cp))
            break;
        e = c;
    }
    if (s == e)
        return NULL_SPAN;
    Span out = {(size_t)(s - (const unsigned char *)b->data), (size_t)(e - s)};
    return out;
}

/* parse._fast.positive_int on decoded text: the value, -1 for None, -2 to decline (text
 * Python would read with its Unicode rules, or a number too large for the int64 columns). */
static long long positive_int(const Bytes *b, Span span)
{
    if (span.off == NONE)
        return -1;
    const unsigned char *s = (const unsigned char *)b->data + span.off, *e = s + span.len;
    for (const unsigned char *c = s; c < e; c++)
        if (*c >= 0x80)
            return -2;
    while (s < e && is_xml_space(*s))
        s++;
    while (e > s && is_xml_space(e[-1]))
        e--;
    if (s == e)
        return -1;
    if (e - s > 18)
        return -2;
    long long value = 0;
    for (; s < e; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        value = value * 10 + (*s - '0');
    }
    return value > 0 ? value : -1;
}

/* The first four digits in a row of a MedlineDate ("1998 Dec-1999 Jan" -> 1998), -1 for
 * none, -2 to decline text with non-ASCII characters (Python's \d reads other digits). */
static long long medline_date_year(const Bytes *b, Span span)
{
    if (span.off == NONE)
        return -1;
    const unsigned char *s = (const unsigned char *)b->data + span.off;
    int run = 0;
    long long value = -1;
    for (size_t i = 0; i < span.len; i++) {
        if (s[i] >= 0x80)
            return -2;
        if (s[i] >= '0' && s[i] <= '9') {
            if (++run == 4 && value < 0)
                value = (s[i - 3] - '0') * 1000 + (s[i - 2] - '0') * 100 + (s[i - 1] - '0') * 10 +
                        (s[i] - '0');
        } else {
            run = 0;
        }
    }
    return value;
}

static int span_equals(const Bytes *b, Span span, const char *s)
{
    size_t n = strlen(s);
    return span.off != NONE && span.len == n && memcmp(b->data + span.off, s, n) == 0;
}

/* Decodes the named attribute into r->attrs; *found is 0 when it is absent. */
static int attribute(Reader *r, const Attr *attrs, int n, const char *name, Span *value,
                     int *found)
{
    size_t len = strlen(name);
    *value = NULL_SPAN;
    *found = 0;
    for (int i = 0; i < n; i++) {
        if (attrs[i].name_len == len && memcmp(attrs[i].name, name, len) == 0) {
            const unsigned char *p = attrs[i].value;
            size_t off = r->attrs.len;
            /* already checked once: this pass can only run out of memory */
            int got = chars(&p, attrs[i].value + attrs[i].value_len + 1, p[attrs[i].value_len],
                            &r->attrs);
            if (got != R_ACCEPT)
                return got == R_NOMEM ? R_NOMEM : R_DECLINE;
            value->off = off;
            value->len = r->attrs.len - off;
            *found = 1;
            return R_ACCEPT;
        }
    }
    return R_ACCEPT;
}

/* ------------------------------------------------------------------ elements */

/* What an element starting here is to the record, from its tag and where it sits (the
 * same places add_record looks). Returns R_ACCEPT or R_DECLINE (or R_NOMEM). */
static int start_element(Reader *r, Open *e, int tag, const Attr *attrs, int n_attrs)
{
    int at = r->depth; /* e's index on the stack; its parent is at - 1 */
    int found = 0, got = R_ACCEPT;
    e->role = ROLE_NONE;
    e->leaf = 0;
    e->skip = 0;
    e->attr = NULL_SPAN;

    if (at > 0 && (tag == T_PubmedArticle || tag == T_PubmedBookArticle || tag == T_DeleteCitation))
        return R_DECLINE; /* a record inside a record: the whole-file reader reads it as two */
    e->tag = tag;
    if (tag >= FIRST_UNREAD) {
        /* the lxml path cuts these subtrees out by their byte markers, up to the first end
         * marker: one inside another of its name is cut differently; lxml decides */
        if (r->open_unread[tag])
            return R_DECLINE;
        r->open_unread[tag]++;
        r->in_unread++;
        return R_ACCEPT;
    }
    if (r->kind == KIND_DELETION) {
        if (at == 1 && tag == T_PMID)
            e->role = ROLE_DELETED_PMID;
    } else if (r->kind == KIND_ARTICLE) {
        if (at == 1 && tag == T_MedlineCitation) {
            if (r->citation_seen)
                return R_DECLINE; /* a second MedlineCitation: left to lxml */
            r->citation_seen = r->in_citation = 1;
            e->role = ROLE_CITATION;
        } else if (at == 1 && tag == T_PubmedData) {
            e->role = ROLE_PUBMED_DATA;
        } else if (tag == T_ReferenceList && r->reference_list_at < 0 &&
                   r->pubmed_data_at == at - 1) {
            e->role = ROLE_REFERENCE_LIST;
        } else if (tag == T_ArticleId && r->reference_list_at >= 0) {
            got = attribute(r, attrs, n_attrs, "IdType", &e->attr, &found);
            if (got == R_ACCEPT && span_equals(&r->attrs, e->attr, "pubmed"))
                e->role = ROLE_REFERENCE_ID;
        } else if (r->in_citation) {
            switch (tag) {
            case T_PMID:
                if (!r->pmid_seen) {
                    /* the record's own PMID is the first, and a child of MedlineCitation */
                    r->pmid_seen = 1;
                    if (r->stack[at - 1].role != ROLE_CITATION)
                        return R_DECLINE;
                    e->role = ROLE_OWN_PMID;
                    got = attribute(r, attrs, n_attrs, "Version", &e->attr, &found);
                } else if (r->correction_at == at - 1) {
                    e->role = ROLE_CORRECTION_PMID;
                }
                break;
            case T_ArticleTitle:
                e->role = ROLE_ARTICLE_TITLE;
                break;
            case T_Title:
                e->role = ROLE_JOURNAL_TITLE;
                break;
            case T_AbstractText:
                e->role = ROLE_ABSTRACT_TEXT;
                e->skip = r->other_abstract;
                got = attribute(r, attrs, n_attrs, "Label", &e->attr, &found);
                break;
            case T_OtherAbstract:
                r->other_abstract = 1;
                break;
            case T_Language:
                e->role = ROLE_LANGUAGE;
                break;
            case T_PubDate:
                e->role = ROLE_PUBDATE;
                break;
            case T_Year:
            case T_MedlineDate:
                /* the first Year or MedlineDate child of PubDate gives the year */
                if (r->pubdate_at == at - 1 && !r->date_part_seen) {
                    r->date_part_seen = 1;
                    e->role = tag == T_Year ? ROLE_YEAR : ROLE_MEDLINE_DATE;
                }
                break;
            case T_PublicationType:
                e->role = ROLE_PUBTYPE;
                got = attribute(r, attrs, n_attrs, "UI", &e->attr, &found);
                if (got == R_ACCEPT && !found)
                    return R_DECLINE;
                break;
            case T_MeshHeading:
                e->role = ROLE_HEADING;
                break;
            case T_DescriptorName:
            case T_QualifierName:
                if (r->heading_at == at - 1) {
                    Span ui, major;
                    int has_major;
                    got = attribute(r, attrs, n_attrs, "UI", &ui, &found);
                    if (got != R_ACCEPT)
                        return got;
                    if (!found)
                        return R_DECLINE;
                    got = attribute(r, attrs, n_attrs, "MajorTopicYN", &major, &has_major);
                    if (got != R_ACCEPT)
                        return got;
                    int is_major = span_equals(&r->attrs, major, "Y");
                    if (tag == T_DescriptorName) {
                        /* a later descriptor in the same heading replaces the earlier */
                        r->heading_has_descriptor = 1;
                        r->heading_ui = ui;
                        r->heading_major = is_major;
                    } else if (r->heading_has_descriptor) {
                        Heading row = {r->heading_ui, r->heading_major, ui, is_major};
                        r->heading_qualifiers++;
                        if (vec_push(&r->headings, row) < 0)
                            return R_NOMEM;
                    }
                }
                break;
            case T_Chemical:
                e->role = ROLE_CHEMICAL;
                break;
            case T_RegistryNumber:
                if (r->chemical_at == at - 1)
                    e->role = ROLE_REGISTRY;
                break;
            case T_NameOfSubstance:
                if (r->chemical_at == at - 1) {
                    e->role = ROLE_SUBSTANCE;
                    got = attribute(r, attrs, n_attrs, "UI", &e->attr, &found);
                    if (got == R_ACCEPT && !found)
                        return R_DECLINE;
                }
                break;
            case T_CommentsCorrections:
                e->role = ROLE_CORRECTION;
                got = attribute(r, attrs, n_attrs, "RefType", &e->attr, &found);
                break;
            }
        }
    }
    if (got != R_ACCEPT)
        return got;
    if (r->in_unread && (e->role != ROLE_NONE || tag == T_OtherAbstract))
        return R_DECLINE; /* a field inside a subtree the lxml path does not read */
    if (NO_NESTING[e->role] && r->open_roles[e->role])
        return R_DECLINE;
    r->open_roles[e->role]++;

    switch (e->role) {
    case ROLE_OWN_PMID:
    case ROLE_CORRECTION_PMID:
    case ROLE_YEAR:
    case ROLE_MEDLINE_DATE:
    case ROLE_REFERENCE_ID:
    case ROLE_DELETED_PMID:
        e->leaf = 1; /* read as .text by lxml: a child element would cut it */
        /* fall through */
    case ROLE_ARTICLE_TITLE:
    case ROLE_JOURNAL_TITLE:
    case ROLE_ABSTRACT_TEXT:
    case ROLE_LANGUAGE:
    case ROLE_PUBTYPE:
    case ROLE_REGISTRY:
    case ROLE_SUBSTANCE:
        e->text_off = r->text.len;
        r->collecting++;
        break;
    case ROLE_PUBDATE:
        r->pubdate_at = at;
        r->date_part_seen = 0;
        r->date_year = -1;
        break;
    case ROLE_HEADING:
        r->heading_at = at;
        r->heading_has_descriptor = r->heading_qualifiers = 0;
        break;
    case ROLE_CHEMICAL:
        r->chemical_at = at;
        r->chemical.registry = r->chemical.ui = r->chemical.name = NULL_SPAN;
        break;
    case ROLE_CORRECTION:
        r->correction_at = at;
        r->correction.ref_type = e->attr;
        r->correction.ref_pmid = -1;
        break;
    case ROLE_PUBMED_DATA:
        r->pubmed_data_at = at;
        break;
    case ROLE_REFERENCE_LIST:
        r->reference_list_at = at;
        break;
    }
    return R_ACCEPT;
}

static size_t slot(long long pmid, size_t cap)
{
    return (size_t)(((unsigned long long)pmid * 0x9e3779b97f4a7c15ull) >> 7) & (cap - 1);
}

/* Keeps each cited PMID once, in first-seen order: a linear look for the usual short
 * lists, an open-addressing set (cleared per record, sized to the record) for long ones. */
static int cite(Reader *r, long long pmid)
{
    if (r->cited.len < 32) {
        for (size_t i = 0; i < r->cited.len; i++)
            if (r->cited.items[i] == pmid)
                return R_ACCEPT;
        return vec_push(&r->cited, pmid) < 0 ? R_NOMEM : R_ACCEPT;
    }
    if ((r->cited.len + 1) * 2 > r->seen_used) {
        /* (re)build the set at four times the list, at most half full until the next build */
        size_t cap = 256;
        while (cap < (r->cited.len + 1) * 4)
            cap *= 2;
        if (cap > r->seen_cap) {
            PyMem_Free(r->seen);
            r->seen = PyMem_Malloc(cap * sizeof(long long));
            r->seen_cap = r->seen == NULL ? 0 : cap;
            if (r->seen == NULL)
                return R_NOMEM;
        }
        r->seen_used = cap;
        memset(r->seen, 0, cap * sizeof(long long));
        for (size_t i = 0; i < r->cited.len; i++) {
            size_t h = slot(r->cited.items[i], cap);
            while (r->seen[h])
                h = (h + 1) & (cap - 1);
            r->seen[h] = r->cited.items[i];
        }
    }
    size_t h = slot(pmid, r->seen_used);
    while (r->seen[h]) {
        if (r->seen[h] == pmid)
            return R_ACCEPT;
        h = (h + 1) & (r->seen_used - 1);
    }
    r->seen[h] = pmid;
    return vec_push(&r->cited, pmid) < 0 ? R_NOMEM : R_ACCEPT;
}

/* The end tag of the element on top of the stack: what it gives to the record. */
static int end_element(Reader *r)
{
    Open *e = &r->stack[r->depth - 1];
    int at = r->depth - 1;
    Span text = NULL_SPAN;
    if (e->tag >= FIRST_UNREAD) {
        r->open_unread[e->tag]--;
        r->in_unread--;
        return R_ACCEPT;
    }
    if (e->text_off != NONE) {
        text.off = e->text_off;
        text.len = r->text.len - e->text_off;
        r->collecting--;
    }
    r->open_roles[e->role]--;
    long long value;
    switch (e->role) {
    case ROLE_CITATION:
        r->in_citation = 0;
        break;
    case ROLE_OWN_PMID:
        r->pmid = positive_int(&r->text, text);
        if (r->pmid < 0)
            return R_DECLINE; /* lxml reports a missing or non-numeric PMID */
        if (e->attr.off != NONE) {
            r->version = positive_int(&r->attrs, e->attr);
            if (r->version < 0)
                return R_DECLINE;
        }
        break;
    case ROLE_CORRECTION_PMID:
        value = positive_int(&r->text, text);
        if (value == -2)
            return R_DECLINE;
        r->correction.ref_pmid = value;
        break;
    case ROLE_ARTICLE_TITLE:
        r->title = strip(&r->text, text.off, text.len);
        break;
    case ROLE_JOURNAL_TITLE:
        r->journal = strip(&r->text, text.off, text.len);
        break;
    case ROLE_ABSTRACT_TEXT:
        if (!e->skip) {
            Section section = {e->attr, strip(&r->text, text.off, text.len)};
            if (section.text.off != NONE && vec_push(&r->sections, section) < 0)
                return R_NOMEM;
        }
        break;
    case ROLE_LANGUAGE:
        /* the first Language with text */
        if (r->language.off == NONE)
            r->language = strip(&r->text, text.off, text.len);
        break;
    case ROLE_YEAR:
    case ROLE_MEDLINE_DATE:
        value = e->role == ROLE_YEAR ? positive_int(&r->text, text)
                                     : medline_date_year(&r->text, text);
        if (value == -2)
            return R_DECLINE;
        r->date_year = value >= 1000 && value <= 2100 ? value : -1;
        break;
    case ROLE_PUBDATE:
        r->year = r->date_year; /* the last PubDate gives the year, None included */
        r->pubdate_at = -1;
        break;
    case ROLE_PUBTYPE: {
        PubType row = {e->attr, strip(&r->text, text.off, text.len)};
        if (vec_push(&r->pubtypes, row) < 0)
            return R_NOMEM;
        break;
    }
    case ROLE_HEADING:
        if (!r->heading_has_descriptor)
            return R_DECLINE; /* lxml reports a heading without descriptor */
        if (r->heading_qualifiers == 0) {
            Heading row = {r->heading_ui, r->heading_major, NULL_SPAN, 0};
            if (vec_push(&r->headings, row) < 0)
                return R_NOMEM;
        }
        r->heading_at = -1;
        break;
    case ROLE_REGISTRY:
        r->chemical.registry = strip(&r->text, text.off, text.len);
        break;
    case ROLE_SUBSTANCE:
        r->chemical.ui = e->attr;
        r->chemical.name = strip(&r->text, text.off, text.len);
        break;
    case ROLE_CHEMICAL:
        if (vec_push(&r->chemicals, r->chemical) < 0)
            return R_NOMEM;
        r->chemical_at = -1;
        break;
    case ROLE_CORRECTION:
        if (vec_push(&r->corrections, r->correction) < 0)
            return R_NOMEM;
        r->correction_at = -1;
        break;
    case ROLE_PUBMED_DATA:
        r->pubmed_data_at = -1;
        break;
    case ROLE_REFERENCE_LIST:
        if (r->reference_list_at == at)
            r->reference_list_at = -1;
        break;
    case ROLE_REFERENCE_ID:
        value = positive_int(&r->text, text);
        if (value == -2)
            return R_DECLINE;
        if (value > 0)
            return cite(r, value);
        break;
    case ROLE_DELETED_PMID:
        value = positive_int(&r->text, text);
        if (value < 0)
            return R_DECLINE; /* lxml reports a non-numeric deleted PMID */
        if (vec_push(&r->deleted, value) < 0)
            return R_NOMEM;
        break;
    }
    return R_ACCEPT;
}

/* A name at p: its length, 0 if none starts here; *pp is moved past it. */
static size_t name(const unsigned char **pp)
{
    const unsigned char *p = *pp;
    if (!NAME_START[*p])
        return 0;
    while (NAME_CHAR[*p])
        p++;
    size_t len = (size_t)(p - *pp);
    *pp = p;
    return len;
}

/* A name with an optional namespace prefix ("mml:math"): its whole length, 0 if none
 * starts here or the colon is misplaced; *prefix_len is the prefix's length, 0 if none. */
static size_t qname(const unsigned char **pp, size_t *prefix_len)
{
    const unsigned char *start = *pp;
    *prefix_len = 0;
    size_t len = name(pp);
    if (len == 0 || **pp != ':')
        return len;
    (*pp)++;
    if (name(pp) == 0 || **pp == ':')
        return 0; /* "a:", "a:b:c": a namespace error to libxml2 */
    *prefix_len = len;
    return (size_t)(*pp - start);
}

/* Looks the prefix up among the declarations in scope; 1 when declared. */
static int prefix_declared(const Reader *r, const unsigned char *prefix, size_t len,
                           const unsigned char **uri, size_t *uri_len)
{
    for (int i = r->n_ns - 1; i >= 0; i--) {
        if (r->ns[i].prefix_len == len && memcmp(r->ns[i].prefix, prefix, len) == 0) {
            *uri = r->ns[i].uri;
            *uri_len = r->ns[i].uri_len;
            return 1;
        }
    }
    return 0;
}

/*
 * The namespace declarations and prefixes of a start tag (its element will sit at `at`).
 * Only the forms lxml gives no-namespace names for the fields are accepted: "xmlns:p"
 * declarations with a plain URI, and prefixes that are declared. A default namespace
 * ("xmlns=") would rename the fields' elements, so it is declined, as is any other name
 * starting with "xml".
 */
static int namespaces(Reader *r, int at, const unsigned char *tag, size_t tag_prefix,
                      const Attr *attrs, int n)
{
    for (int i = 0; i < n; i++) {
        const Attr *a = &attrs[i];
        if (a->prefix_len == 5 && memcmp(a->name, "xmlns", 5) == 0) {
            const unsigned char *prefix = a->name + 6;
            size_t prefix_len = a->name_len - 6;
            if (a->value_len == 0 || (prefix_len >= 3 && memcmp(prefix, "xml", 3) == 0))
                return R_DECLINE; /* an empty URI is an error; xml prefixes are reserved */
            for (size_t k = 0; k < a->value_len; k++)
                if (a->value[k] == '&' || a->value[k] <= ' ' || a->value[k] >= 0x80)
                    return R_DECLINE; /* URIs are compared as written: keep them plain */
            if (r->n_ns == MAX_NS)
                return R_DECLINE;
            Namespace *ns = &r->ns[r->n_ns++];
            ns->prefix = prefix;
            ns->prefix_len = prefix_len;
            ns->uri = a->value;
            ns->uri_len = a->value_len;
            ns->depth = at;
        } else if (a->name_len >= 3 && memcmp(a->name, "xml", 3) == 0) {
            return R_DECLINE; /* xmlns (a default namespace), xml:lang, ... */
        }
    }
    const unsigned char *uri, *other_uri;
    size_t uri_len, other_len;
    if (tag_prefix && !prefix_declared(r, tag, tag_prefix, &uri, &uri_len))
        return R_DECLINE; /* an undeclared prefix is an error to libxml2 */
    for (int i = 0; i < n; i++) {
        const Attr *a = &attrs[i];
        if (!a->prefix_len || (a->prefix_len == 5 && memcmp(a->name, "xmlns", 5) == 0))
            continue;
        if (!prefix_declared(r, a->name, a->prefix_len, &uri, &uri_len))
            return R_DECLINE;
        /* two attributes of one local name in one namespace are an error */
        for (int k = 0; k < i; k++) {
            const Attr *b = &attrs[k];
            size_t local = a->name_len - a->prefix_len, b_local = b->name_len - b->prefix_len;
            if (!b->prefix_len || local != b_local ||
                memcmp(a->name + a->prefix_len, b->name + b->prefix_len, local) != 0 ||
                (b->prefix_len == 5 && memcmp(b->name, "xmlns", 5) == 0))
                continue;
            if (prefix_declared(r, b->name, b->prefix_len, &other_uri, &other_len) &&
                other_len == uri_len && memcmp(other_uri, uri, uri_len) == 0)
                return R_DECLINE;
        }
    }
    return R_ACCEPT;
}

/*
 * Reads the tag starting at *pp ('<' + a name start), pushes the element and, for "<x/>",
 * pops it again. Checks the attributes: separated by white space, quoted, unique, no
 * namespace declarations, values well formed.
 */
static int start_tag(Reader *r, const unsigned char **pp, const unsigned char *end, int *closed)
{
    const unsigned char *p = *pp + 1;
    const unsigned char *tag_name = p;
    size_t tag_prefix;
    size_t tag_len = qname(&p, &tag_prefix);
    if (tag_len == 0)
        return p >= end ? R_MORE : R_DECLINE;
    if (tag_len > MAX_NAME)
        return R_DECLINE;
    Attr attrs[MAX_ATTRS];
    int n = 0;
    *closed = 0;
    for (;;) {
        int spaced = 0;
        while (is_xml_space(*p)) {
            p++;
            spaced = 1;
        }
        if (p >= end)
            return R_MORE;
        if (*p == '>') {
            p++;
            break;
        }
        if (*p == '/') {
            if (p + 1 >= end)
                return R_MORE;
            if (p[1] != '>')
                return R_DECLINE;
            p += 2;
            *closed = 1;
            break;
        }
        if (!spaced || n == MAX_ATTRS)
            return R_DECLINE;
        Attr *a = &attrs[n];
        a->name = p;
        a->name_len = qname(&p, &a->prefix_len);
        if (a->name_len == 0)
            return p >= end ? R_MORE : R_DECLINE;
        if (a->name_len > MAX_NAME)
            return R_DECLINE;
        while (is_xml_space(*p))
            p++;
        if (p >= end)
            return R_MORE;
        if (*p != '=')
            return R_DECLINE;
        p++;
        while (is_xml_space(*p))
            p++;
        if (p >= end)
            return R_MORE;
        if (*p != '"' && *p != '\'')
            return R_DECLINE;
        unsigned char quote = *p++;
        a->value = p;
        int got = chars(&p, end, quote, NULL);
        if (got != R_ACCEPT)
            return got;
        a->value_len = (size_t)(p - a->value);
        p++; /* the closing quote */
        for (int i = 0; i < n; i++)
            if (attrs[i].name_len == a->name_len && memcmp(attrs[i].name, a->name, a->name_len) == 0)
                return R_DECLINE; /* libxml2 refuses a repeated attribute */
        n++;
    }

    if (r->depth >= MAX_DEPTH)
        return R_DECLINE;
    if (r->depth > 0 && r->stack[r->depth - 1].leaf)
        return R_DECLINE; /* a child inside an element lxml reads by .text */
    int got = namespaces(r, r->depth, tag_name, tag_prefix, attrs, n);
    if (got != R_ACCEPT)
        return got;
    Open *e = &r->stack[r->depth];
    e->name = tag_name;
    e->name_len = tag_len;
    e->text_off = NONE;
    /* a prefixed name is never one of the fields' tags: lxml names it {uri}local */
    got = start_element(r, e, tag_prefix ? T_OTHER : tag_of(tag_name, tag_len), attrs, n);
    if (got != R_ACCEPT)
        return got;
    r->depth++;
    *pp = p;
    return R_ACCEPT;
}

/* The end tag at *pp ("</"): it must close the element on top of the stack. */
static int end_tag(Reader *r, const unsigned char **pp, const unsigned char *end)
{
    const unsigned char *p = *pp + 2;
    const Open *e = &r->stack[r->depth - 1];
    if ((size_t)(end - p) < e->name_len + 1)
        return R_MORE;
    if (memcmp(p, e->name, e->name_len) != 0 || NAME_CHAR[p[e->name_len]])
        return R_DECLINE;
    p += e->name_len;
    const unsigned char *name_end = p;
    while (is_xml_space(*p))
        p++;
    if (p >= end)
        return R_MORE;
    if (*p != '>')
        return R_DECLINE;
    if (e->tag >= FIRST_UNREAD && p != name_end)
        return R_DECLINE; /* "</AuthorList >" is no end marker to the lxml path's cut */
    *pp = p + 1;
    return end_element(r);
}

/*
 * One record from its '<' at *pp: R_ACCEPT with *pp after its end tag, R_DECLINE,
 * R_MORE when the buffer ends first, or R_NOMEM.
 */
static int read_record(Reader *r, const unsigned char **pp, const unsigned char *end, int kind)
{
    const unsigned char *p = *pp, *first = *pp;
    int got, closed;
    record_reset(r, kind);
    got = start_tag(r, &p, end, &closed);
    if (got != R_ACCEPT)
        return got;
    if (closed)
        goto done_element;
    for (;;) {
        if ((size_t)(p - first) > MAX_RECORD_BYTES)
            return R_DECLINE;
        if (*p != '<') {
            /* text: kept only while an element whose text is read is open */
            got = chars(&p, end, '<', r->collecting ? &r->text : NULL);
            if (got != R_ACCEPT)
                return got;
        }
        if (p + 1 >= end)
            return R_MORE;
        if (p[1] == '/') {
            got = end_tag(r, &p, end);
            if (got != R_ACCEPT)
                return got;
        } else if (NAME_START[p[1]]) {
            got = start_tag(r, &p, end, &closed);
            if (got != R_ACCEPT)
                return got;
            if (closed)
                goto done_element;
            continue;
        } else {
            return R_DECLINE; /* a comment, CDATA, processing instruction or stray '<' */
        }
        goto popped;
    done_element:
        got = end_element(r);
        if (got != R_ACCEPT)
            return got;
    popped:
        --r->depth;
        while (r->n_ns > 0 && r->ns[r->n_ns - 1].depth >= r->depth)
            r->n_ns--; /* the declarations of the element just closed go out of scope */
        if (r->depth == 0)
            break; /* the record's own end tag */
    }
    if (kind == KIND_ARTICLE && (!r->citation_seen || r->pmid < 0))
        return R_DECLINE; /* lxml reports a record without MedlineCitation or PMID */
    *pp = p;
    return R_ACCEPT;
}

/* ------------------------------------------------------------------ rows into Python */

static PyObject *text_or_none(const Bytes *b, Span span)
{
    if (span.off == NONE)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(b->data + span.off, (Py_ssize_t)span.len, "strict");
}

static PyObject *text_or_empty(const Bytes *b, Span span)
{
    if (span.off == NONE)
        return PyUnicode_FromStringAndSize("", 0);
    return text_or_none(b, span);
}

/* Appends `value` (a new reference, possibly NULL after an error) and releases it. */
static int put(PyObject *list, PyObject *value)
{
    if (value == NULL)
        return -1;
    int failed = PyList_Append(list, value);
    Py_DECREF(value);
    return failed;
}

static int put_shared(PyObject *list, PyObject *value)
{
    return PyList_Append(list, value);
}

/* the abstract: its sections joined by newlines, "LABEL: text" where a label is given */
static PyObject *abstract(Reader *r)
{
    if (r->sections.len == 0)
        Py_RETURN_NONE;
    r->scratch.len = 0;
    for (size_t i = 0; i < r->sections.len; i++) {
        Section *s = &r->sections.items[i];
        if (i > 0 && bytes_put(&r->scratch, "\n", 1) < 0)
            return PyErr_NoMemory();
        if (s->label.off != NONE && s->label.len > 0) {
            if (bytes_put(&r->scratch, r->attrs.data + s->label.off, s->label.len) < 0 ||
                bytes_put(&r->scratch, ": ", 2) < 0)
                return PyErr_NoMemory();
        }
        if (bytes_put(&r->scratch, r->text.data + s->text.off, s->text.len) < 0)
            return PyErr_NoMemory();
    }
    return PyUnicode_DecodeUTF8(r->scratch.data, (Py_ssize_t)r->scratch.len, "strict");
}

#define N_LISTS 30

/* The accepted article's rows, in the order and shapes of Columns.add_record. */
static int emit_article(Reader *r, PyObject **lists)
{
    PyObject **articles = lists, **mesh = lists + 8, **citations = lists + 14;
    PyObject **corrections = lists + 17, **chemicals = lists + 21, **pubtypes = lists + 26;
    PyObject *pmid = PyLong_FromLongLong(r->pmid);
    PyObject *version = PyLong_FromLongLong(r->version);
    int failed = pmid == NULL || version == NULL;
    if (failed)
        goto out;

    failed = put_shared(articles[0], pmid) || put_shared(articles[1], version) ||
             put(articles[2], text_or_none(&r->text, r->title)) ||
             put(articles[3], abstract(r)) ||
             put(articles[4], r->year < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(r->year)) ||
             put(articles[5], text_or_none(&r->text, r->journal)) ||
             put(articles[6], text_or_none(&r->text, r->language)) ||
             put(articles[7], PyLong_FromSize_t(r->pubtypes.len));

    for (size_t i = 0; !failed && i < r->pubtypes.len; i++) {
        PubType *t = &r->pubtypes.items[i];
        failed = put_shared(pubtypes[0], pmid) || put_shared(pubtypes[1], version) ||
                 put(pubtypes[2], text_or_none(&r->attrs, t->ui)) ||
                 put(pubtypes[3], text_or_empty(&r->text, t->name));
    }
    for (size_t i = 0; !failed && i < r->headings.len; i++) {
        Heading *h = &r->headings.items[i];
        int bare = h->qualifier.off == NONE;
        failed = put_shared(mesh[0], pmid) || put_shared(mesh[1], version) ||
                 put(mesh[2], text_or_none(&r->attrs, h->descriptor)) ||
                 put_shared(mesh[3], h->major ? Py_True : Py_False) ||
                 put(mesh[4], text_or_none(&r->attrs, h->qualifier)) ||
                 put_shared(mesh[5], bare ? Py_None : h->qualifier_major ? Py_True : Py_False);
    }
    for (size_t i = 0; !failed && i < r->chemicals.len; i++) {
        ChemicalRow *c = &r->chemicals.items[i];
        failed = put_shared(chemicals[0], pmid) || put_shared(chemicals[1], version) ||
                 put(chemicals[2], text_or_none(&r->text, c->registry)) ||
                 put(chemicals[3], text_or_none(&r->attrs, c->ui)) ||
                 put(chemicals[4], text_or_empty(&r->text, c->name));
    }
    for (size_t i = 0; !failed && i < r->corrections.len; i++) {
        Correction *k = &r->corrections.items[i];
        failed = put_shared(corrections[0], pmid) || put_shared(corrections[1], version) ||
                 put(corrections[2], text_or_empty(&r->attrs, k->ref_type)) ||
                 put(corrections[3], k->ref_pmid < 0 ? Py_NewRef(Py_None)
                                                     : PyLong_FromLongLong(k->ref_pmid));
    }
    for (size_t i = 0; !failed && i < r->cited.len; i++) {
        failed = put_shared(citations[0], pmid) || put_shared(citations[1], version) ||
                 put(citations[2], PyLong_FromLongLong(r->cited.items[i]));
    }
out:
    Py_XDECREF(pmid);
    Py_XDECREF(version);
    return failed ? -1 : 0;
}

static int emit_deletions(Reader *r, PyObject *deleted)
{
    for (size_t i = 0; i < r->deleted.len; i++) {
        PyObject *pmid = PyLong_FromLongLong(r->deleted.items[i]);
        if (pmid == NULL || PyDict_SetItem(deleted, pmid, Py_None) < 0) {
            Py_XDECREF(pmid);
            return -1;
        }
        Py_DECREF(pmid);
    }
    return 0;
}

/* ------------------------------------------------------------------ scan() */

static int starts_with(const unsigned char *p, const unsigned char *end, const char *s)
{
    size_t n = strlen(s);
    return (size_t)(end - p) >= n && memcmp(p, s, n) == 0;
}

static PyObject *scan_records(Reader *r, PyObject *args)
{
    PyObject *buffer, *sinks, *deleted;
    Py_ssize_t pos, limit;
    if (!PyArg_ParseTuple(args, "SnO!O!n:scan", &buffer, &pos, &PyTuple_Type, &sinks,
                          &PyDict_Type, &deleted, &limit))
        return NULL;
    if (PyTuple_GET_SIZE(sinks) != N_LISTS) {
        PyErr_Format(PyExc_ValueError, "scan: expected %d column lists", N_LISTS);
        return NULL;
    }
    PyObject *lists[N_LISTS];
    for (int i = 0; i < N_LISTS; i++) {
        lists[i] = PyTuple_GET_ITEM(sinks, i);
        if (!PyList_Check(lists[i])) {
            PyErr_SetString(PyExc_TypeError, "scan: column sinks must be lists");
            return NULL;
        }
    }
    const unsigned char *base = (const unsigned char *)PyBytes_AS_STRING(buffer);
    const unsigned char *end = base + PyBytes_GET_SIZE(buffer);
    if (pos < 0 || pos > PyBytes_GET_SIZE(buffer)) {
        PyErr_SetString(PyExc_ValueError, "scan: position outside the buffer");
        return NULL;
    }
    const unsigned char *p = base + pos;
    Py_ssize_t accepted = 0, books = 0, decline_end = -1;
    if (limit < 1)
        limit = 1; /* always progress */
    int state;
    for (;;) {
        /* between records only white space; then a record, or the set's end tag */
        while (p < end && (is_xml_space(*p) || *p == '\r'))
            p++;
        if (p >= end) {
            state = ST_MORE;
            break;
        }
        if (*p != '<') {
            state = ST_NOT_SIMPLE;
            break;
        }
        if (starts_with(p, end, "</")) {
            const unsigned char *q = p + 2;
            if (!starts_with(q, end, "PubmedArticleSet")) {
                state = end - q < 16 ? ST_MORE : ST_NOT_SIMPLE;
                break;
            }
            q += 16;
            while (q < end && (is_xml_space(*q) || *q == '\r'))
                q++;
            if (q >= end) {
                state = ST_MORE;
                break;
            }
            if (*q != '>') {
                state = ST_NOT_SIMPLE;
                break;
            }
            p = q + 1;
            state = ST_END;
            break;
        }
        const unsigned char *q = p + 1;
        size_t len = name(&q);
        if (q >= end) {
            state = ST_MORE;
            break;
        }
        int tag = tag_of(p + 1, len), kind;
        if (tag == T_PubmedArticle)
            kind = KIND_ARTICLE;
        else if (tag == T_PubmedBookArticle)
            kind = KIND_BOOK;
        else if (tag == T_DeleteCitation)
            kind = KIND_DELETION;
        else {
            state = ST_NOT_SIMPLE; /* a comment, instruction or another element between records */
            break;
        }
        if (kind == KIND_ARTICLE && accepted >= limit) {
            state = ST_LIMIT;
            break;
        }
        const unsigned char *after = p;
        int got = read_record(r, &after, end, kind);
        if (got == R_NOMEM)
            return PyErr_NoMemory();
        if (got == R_MORE) {
            state = ST_MORE;
            break;
        }
        if (got == R_DECLINE) {
            /* lxml gets the bytes up to the first end tag of the record's name; if that is
             * not the record's real end, lxml fails on them and the file goes to lxml */
            char close[32];
            int n = snprintf(close, sizeof close, "</%s>", TAG_NAMES[tag]);
            const unsigned char *found = memmem(p, (size_t)(end - p), close, (size_t)n);
            if (found == NULL) {
                state = ST_MORE;
                break;
            }
            decline_end = (Py_ssize_t)(found + n - base);
            state = ST_DECLINED;
            break;
        }
        if (kind == KIND_ARTICLE) {
            if (emit_article(r, lists) < 0)
                return NULL;
            accepted++;
        } else if (kind == KIND_BOOK) {
            books++;
        } else if (emit_deletions(r, deleted) < 0) {
            return NULL;
        }
        p = after;
    }
    return Py_BuildValue("ninn", (Py_ssize_t)(p - base), state, decline_end, books);
}

/* Each call has its own reader state: emitting rows allocates Python objects, which can
 * run a finalizer that lets another thread into scan() meanwhile. */
static PyObject *scan(PyObject *self, PyObject *args)
{
    Reader *r = PyMem_Calloc(1, sizeof(Reader));
    if (r == NULL)
        return PyErr_NoMemory();
    PyObject *result = scan_records(r, args);
    reader_free(r);
    PyMem_Free(r);
    return result;
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buffer, pos, column_lists, deleted, limit) -> (pos, state, decline_end, books)\n\n"
     "Reads the records of a PubmedArticleSet in buffer from pos, appending the rows of each\n"
     "accepted article to the 30 column lists and deleted PMIDs to the dict, until the\n"
     "buffer ends (state 0), limit articles are read (1), a record is declined (2: it is\n"
     "buffer[pos:decline_end]), the set's end tag is read (3) or anything but a record\n"
     "stands between records (4). books counts the PubmedBookArticle records passed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_reader",
    "The compiled byte-level reader of NLM PubMed XML records (see _fast.py).",
    -1, METHODS, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__reader(void)
{
    init_classes();
    init_tags();
    PyObject *module = PyModule_Create(&MODULE);
    if (module == NULL)
        return NULL;
    if (PyModule_AddIntConstant(module, "MORE", ST_MORE) < 0 ||
        PyModule_AddIntConstant(module, "LIMIT", ST_LIMIT) < 0 ||
        PyModule_AddIntConstant(module, "DECLINED", ST_DECLINED) < 0 ||
        PyModule_AddIntConstant(module, "END", ST_END) < 0 ||
        PyModule_AddIntConstant(module, "NOT_SIMPLE", ST_NOT_SIMPLE) < 0 ||
        PyModule_AddIntConstant(module, "N_COLUMN_LISTS", N_LISTS) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
