/* A validating walk over a JSON text that builds no value: the C of jsonmembers.pyx.
 *
 * It accepts exactly what the broker's JSON decode accepts (broker.messagetypes._json._loads: orjson, then the
 * standard library for what orjson refuses): RFC 8259 JSON in UTF-8 with an optional leading byte order mark,
 * surrogate code points allowed (the standard library decodes with "surrogatepass" and takes a lone "\ud800"),
 * and integers of at most max_digits digits (the interpreter's int_max_str_digits; 0: no limit). What it cannot
 * decide the same way it answers JM_UNSURE (the caller decodes the whole text instead): a text the standard
 * library would read as UTF-16 or UTF-32 (a NUL in its first two bytes, a UTF-16 byte order mark), and nesting
 * deeper than JM_DEPTH_CAP (where the two decoders' recursion limits differ).
 *
 * On the way it records where the members of the top-level object are: for each wanted name the value of its
 * last occurrence (as orjson and the standard library keep the last of duplicate keys), and the first
 * table_cap members in order. A string is skipped 16 bytes at a time (SSE2) while it holds no quote,
 * backslash, control character or byte past ASCII.
 */
#ifndef BROKER_JSONMEMBERS_H
#define BROKER_JSONMEMBERS_H

#include <stddef.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

enum { JM_OK = 0, JM_INVALID = 1, JM_UNSURE = 2, JM_TOO_DEEP = 3 };
/* Deeper nesting is JM_UNSURE (MAX_DEPTH_LIMIT, the deepest a publish may be, is 200). */
#define JM_DEPTH_CAP 256
/* A wanted name is compared with an escaped key only when the key's text is short enough to decode to it:
 * an escape takes at most 6 bytes per byte of UTF-8 it stands for. */
#define JM_ESCAPE_RATIO 6

typedef struct {
    const unsigned char *name; /* UTF-8 (surrogates as 3 bytes, "surrogatepass") */
    ptrdiff_t len;
    ptrdiff_t start, end;       /* the value's text of the last occurrence; -1: absent */
} jm_want;

typedef struct {
    ptrdiff_t key_start, key_end; /* the key's text between its quotes */
    int escaped;                  /* the key holds a backslash */
    ptrdiff_t start, end;         /* the value's text */
} jm_member;

typedef struct {
    const unsigned char *p;
    ptrdiff_t n;
    jm_want *wants;
    ptrdiff_t nwants;
    ptrdiff_t max_want;           /* the longest wanted name */
    jm_member *table;
    ptrdiff_t table_cap;
    ptrdiff_t max_digits;         /* an integer with more digits is refused; 0: no limit */
    ptrdiff_t max_depth;          /* nesting deeper than this is JM_TOO_DEEP; -1: no bound */
    /* results */
    ptrdiff_t root_at;            /* where the top-level value starts */
    ptrdiff_t members;            /* members of the top-level object (every occurrence) */
    ptrdiff_t error_at;
    const char *error;
} jm_scan;

static inline int jm_fail(jm_scan *s, ptrdiff_t at, const char *why) {
    s->error_at = at;
    s->error = why;
    return JM_INVALID;
}

static inline int jm_is_ws(unsigned char c) { return c == 0x20 || c == 0x0a || c == 0x0d || c == 0x09; }

/* jm_ws past its first byte, which is whitespace: out of line, so the usual case (no space) stays small. */
static ptrdiff_t jm_ws_run(const unsigned char *p, ptrdiff_t i, ptrdiff_t n) {
    i++;
    if (i >= n || !jm_is_ws(p[i]))
        return i;
#if defined(__SSE2__)
    {
        const __m128i sp = _mm_set1_epi8(0x20), nl = _mm_set1_epi8(0x0a), cr = _mm_set1_epi8(0x0d),
                      tab = _mm_set1_epi8(0x09);
        while (i + 16 <= n) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
            __m128i ws = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, sp), _mm_cmpeq_epi8(v, nl)),
                                      _mm_or_si128(_mm_cmpeq_epi8(v, cr), _mm_cmpeq_epi8(v, tab)));
            int other = _mm_movemask_epi8(ws) ^ 0xFFFF;
            if (other)
                return i + __builtin_ctz((unsigned)other);
            i += 16;
        }
    }
#endif
    while (i < n && jm_is_ws(p[i]))
        i++;
    return i;
}

/* The first position at or after i that is not JSON whitespace (n: none). A long run (indentation) is skipped 16
 * bytes at a time. */
static inline ptrdiff_t jm_ws(const unsigned char *p, ptrdiff_t i, ptrdiff_t n) {
    if (__builtin_expect(i >= n || !jm_is_ws(p[i]), 1))
        return i;
    return jm_ws_run(p, i, n);
}

static inline int jm_hex(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static inline int jm_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

/* The length of the UTF-8 sequence at p[i] (lead byte >= 0x80), surrogates allowed; 0 when invalid. */
static inline int jm_utf8(const unsigned char *p, ptrdiff_t i, ptrdiff_t n) {
    unsigned char c = p[i];
    if (c >= 0xC2 && c <= 0xDF)
        return (i + 1 < n && jm_cont(p[i + 1])) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (i + 2 >= n || !jm_cont(p[i + 1]) || !jm_cont(p[i + 2])) return 0;
        if (c == 0xE0 && p[i + 1] < 0xA0) return 0; /* overlong */
        return 3;                                    /* 0xED: surrogates, as "surrogatepass" decodes them */
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (i + 3 >= n || !jm_cont(p[i + 1]) || !jm_cont(p[i + 2]) || !jm_cont(p[i + 3])) return 0;
        if (c == 0xF0 && p[i + 1] < 0x90) return 0; /* overlong */
        if (c == 0xF4 && p[i + 1] > 0x8F) return 0; /* past U+10FFFF */
        return 4;
    }
    return 0;
}

/* The position after the special byte at p[j] of a string (not its closing quote): an escape (checked), or a
 * character past ASCII with the run of letters of the same width after it (checked); -1 (error set) for a
 * control character, a bad escape, invalid UTF-8 or the end of the text. */
static inline ptrdiff_t jm_special(jm_scan *s, ptrdiff_t j, int *escaped) {
    const unsigned char *p = s->p;
    ptrdiff_t n = s->n;
    unsigned char c = p[j];
    if (c == '\\') {
        *escaped = 1;
        if (j + 1 >= n)
            return jm_fail(s, j, "unterminated string"), -1;
        c = p[j + 1];
        if (c == 'u') {
            if (j + 5 >= n || jm_hex(p[j + 2]) < 0 || jm_hex(p[j + 3]) < 0 || jm_hex(p[j + 4]) < 0
                || jm_hex(p[j + 5]) < 0)
                return jm_fail(s, j, "invalid \\u escape"), -1;
            return j + 6;
        }
        if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't')
            return j + 2;
        return jm_fail(s, j, "invalid escape"), -1;
    }
    if (c < 0x20)
        return jm_fail(s, j, "control character in a string"), -1;
    /* Past ASCII: a run of two-byte or of three-byte sequences (a script's letters) in a tight loop. */
    if (c >= 0xC2 && c <= 0xDF) {
        while (j + 1 < n && p[j] >= 0xC2 && p[j] <= 0xDF && jm_cont(p[j + 1]))
            j += 2;
    } else if (c >= 0xE1 && c <= 0xEF) {
        while (j + 2 < n && p[j] >= 0xE1 && p[j] <= 0xEF && jm_cont(p[j + 1]) && jm_cont(p[j + 2]))
            j += 3;
    }
    if (j < n && p[j] >= 0x80) {
        int len = jm_utf8(p, j, n);
        if (len == 0)
            return jm_fail(s, j, "invalid UTF-8"), -1;
        j += len;
    }
    return j;
}

/* The position of the quote closing the string whose text starts at i; -1 (error set) when it is invalid.
 * *escaped: it holds a backslash. 16 bytes at a time: the quotes, backslashes, control characters and bytes
 * past ASCII of a block are found at once (SSE2) and handled in turn. */
static inline ptrdiff_t jm_string(jm_scan *s, ptrdiff_t i, int *escaped) {
    const unsigned char *p = s->p;
    ptrdiff_t n = s->n;
    *escaped = 0;
#if defined(__SSE2__)
    {
        const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
        while (i + 16 <= n) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
            /* signed: a byte past ASCII is negative, so "< 0x20" also finds it */
            __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                     _mm_cmplt_epi8(v, space));
            unsigned mask = (unsigned)_mm_movemask_epi8(m);
            ptrdiff_t base = i, next = i + 16;
            while (mask) {
                ptrdiff_t j = base + __builtin_ctz(mask);
                if (p[j] == '"')
                    return j;
                next = jm_special(s, j, escaped);
                if (next < 0)
                    return -1;
                if (next - base >= 16)
                    break;
                mask &= 0xFFFFu << (next - base); /* what that special covered is done */
                next = base + 16;
            }
            i = next;
        }
    }
#endif
    while (i < n) {
        unsigned char c = p[i];
        if (c == '"')
            return i;
        if (c == '\\' || c < 0x20 || c >= 0x80) {
            i = jm_special(s, i, escaped);
            if (i < 0)
                return -1;
        } else {
            i++;
        }
    }
    jm_fail(s, i, "unterminated string");
    return -1;
}

/* The end of the number at i; -1 (error set) when there is none or it is refused. */
static inline ptrdiff_t jm_number(jm_scan *s, ptrdiff_t i) {
    const unsigned char *p = s->p;
    ptrdiff_t n = s->n, start = i, digits;
    int integer = 1;
    if (p[i] == '-')
        i++;
    digits = i;
    if (i < n && p[i] == '0') {
        i++;
    } else if (i < n && p[i] >= '1' && p[i] <= '9') {
        while (i < n && p[i] >= '0' && p[i] <= '9') i++;
    } else {
        return jm_fail(s, start, "invalid number"), -1;
    }
    digits = i - digits;
    if (i < n && p[i] == '.') {
        integer = 0;
        i++;
        if (i >= n || p[i] < '0' || p[i] > '9')
            return jm_fail(s, start, "invalid number"), -1;
        while (i < n && p[i] >= '0' && p[i] <= '9') i++;
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        integer = 0;
        i++;
        if (i < n && (p[i] == '+' || p[i] == '-')) i++;
        if (i >= n || p[i] < '0' || p[i] > '9')
            return jm_fail(s, start, "invalid number"), -1;
        while (i < n && p[i] >= '0' && p[i] <= '9') i++;
    }
    if (integer && s->max_digits > 0 && digits > s->max_digits)
        return jm_fail(s, start, "integer with too many digits"), -1;
    return i;
}

/* Write the UTF-8 of code point cp (surrogates as 3 bytes) at out; its length. */
static inline int jm_put_utf8(unsigned char *out, unsigned cp) {
    if (cp < 0x80) { out[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { out[0] = 0xC0 | (cp >> 6); out[1] = 0x80 | (cp & 0x3F); return 2; }
    if (cp < 0x10000) {
        out[0] = 0xE0 | (cp >> 12); out[1] = 0x80 | ((cp >> 6) & 0x3F); out[2] = 0x80 | (cp & 0x3F);
        return 3;
    }
    out[0] = 0xF0 | (cp >> 18); out[1] = 0x80 | ((cp >> 12) & 0x3F); out[2] = 0x80 | ((cp >> 6) & 0x3F);
    out[3] = 0x80 | (cp & 0x3F);
    return 4;
}

static inline unsigned jm_hex4(const unsigned char *p) {
    return (unsigned)(jm_hex(p[0]) << 12 | jm_hex(p[1]) << 8 | jm_hex(p[2]) << 4 | jm_hex(p[3]));
}

/* Whether the (validated) escaped key text p[a:b] decodes to name: escapes decoded as the decoders do (a high
 * surrogate followed by a low one makes one code point; a lone one stays), compared byte by byte. */
static int jm_escaped_equals(const unsigned char *p, ptrdiff_t a, ptrdiff_t b, const unsigned char *name,
                             ptrdiff_t len) {
    unsigned char buf[4];
    ptrdiff_t at = 0;
    while (a < b) {
        int k;
        if (p[a] != '\\') {
            if (at >= len || p[a] != name[at]) return 0;
            at++;
            a++;
            continue;
        }
        unsigned char c = p[a + 1];
        if (c == 'u') {
            unsigned cp = jm_hex4(p + a + 2);
            a += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF && a + 6 <= b && p[a] == '\\' && p[a + 1] == 'u') {
                unsigned low = jm_hex4(p + a + 2);
                if (low >= 0xDC00 && low <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    a += 6;
                }
            }
            k = jm_put_utf8(buf, cp);
        } else {
            buf[0] = c == 'b' ? '\b' : c == 'f' ? '\f' : c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c;
            k = 1;
            a += 2;
        }
        if (at + k > len || memcmp(name + at, buf, (size_t)k) != 0) return 0;
        at += k;
    }
    return at == len;
}

static void jm_member_done(jm_scan *s, ptrdiff_t ks, ptrdiff_t ke, int escaped, ptrdiff_t vs, ptrdiff_t ve) {
    ptrdiff_t j, klen = ke - ks;
    if (s->members < s->table_cap) {
        jm_member *m = &s->table[s->members];
        m->key_start = ks; m->key_end = ke; m->escaped = escaped; m->start = vs; m->end = ve;
    }
    s->members++;
    if (!s->nwants)
        return;
    if (escaped ? klen > JM_ESCAPE_RATIO * s->max_want : klen > s->max_want)
        return;
    for (j = 0; j < s->nwants; j++) {
        jm_want *w = &s->wants[j];
        if (escaped ? jm_escaped_equals(s->p, ks, ke, w->name, w->len)
                    : (klen == w->len && memcmp(s->p + ks, w->name, (size_t)klen) == 0)) {
            w->start = vs;
            w->end = ve;
        }
    }
}

/* Walk the whole text: JM_OK, JM_INVALID (error and error_at set), JM_TOO_DEEP (nesting deeper than max_depth
 * before any error) or JM_UNSURE. */
static int jm_run(jm_scan *s) {
    const unsigned char *p = s->p;
    ptrdiff_t n = s->n, i = 0, depth = 0;
    ptrdiff_t key_start = 0, key_end = 0, value_start = 0;
    int key_escaped = 0;
    char stack[JM_DEPTH_CAP];
    s->members = 0;
    s->error = NULL;
    s->error_at = 0;
    s->root_at = 0;
    /* What the standard library would not read as UTF-8 (json.detect_encoding) is left to it. */
    if (n >= 2 && (p[0] == 0 || p[1] == 0 || (p[0] == 0xFF && p[1] == 0xFE) || (p[0] == 0xFE && p[1] == 0xFF)))
        return JM_UNSURE;
    if (n >= 3 && p[0] == 0xEF && p[1] == 0xBB && p[2] == 0xBF)
        i = 3;
    i = jm_ws(p, i, n);
    s->root_at = i;

value:
    i = jm_ws(p, i, n);
    if (i >= n)
        return jm_fail(s, i, "expected a value");
    if (depth == 1 && stack[0] == '{')
        value_start = i;
    switch (p[i]) {
    case '{':
    case '[':
        if (depth == s->max_depth)
            return JM_TOO_DEEP;
        if (depth == JM_DEPTH_CAP)
            return JM_UNSURE;
        stack[depth++] = (char)p[i];
        i = jm_ws(p, i + 1, n);
        if (i < n && p[i] == (stack[depth - 1] == '{' ? '}' : ']')) {
            i++;
            depth--;
            goto after_value;
        }
        if (stack[depth - 1] == '{')
            goto key;
        goto value;
    case '"': {
        int escaped;
        ptrdiff_t end = jm_string(s, i + 1, &escaped);
        if (end < 0)
            return JM_INVALID;
        i = end + 1;
        goto after_value;
    }
    case 't':
        if (i + 4 > n || memcmp(p + i, "true", 4) != 0)
            return jm_fail(s, i, "unexpected character");
        i += 4;
        goto after_value;
    case 'f':
        if (i + 5 > n || memcmp(p + i, "false", 5) != 0)
            return jm_fail(s, i, "unexpected character");
        i += 5;
        goto after_value;
    case 'n':
        if (i + 4 > n || memcmp(p + i, "null", 4) != 0)
            return jm_fail(s, i, "unexpected character");
        i += 4;
        goto after_value;
    default:
        if (p[i] == '-' || (p[i] >= '0' && p[i] <= '9')) {
            i = jm_number(s, i);
            if (i < 0)
                return JM_INVALID;
            goto after_value;
        }
        return jm_fail(s, i, "unexpected character");
    }

key:
    /* i is at the first non-space byte where an object's key must start */
    if (i >= n || p[i] != '"')
        return jm_fail(s, i, "expected a key");
    {
        int escaped;
        ptrdiff_t end = jm_string(s, i + 1, &escaped);
        if (end < 0)
            return JM_INVALID;
        if (depth == 1) {
            key_start = i + 1;
            key_end = end;
            key_escaped = escaped;
        }
        i = jm_ws(p, end + 1, n);
    }
    if (i >= n || p[i] != ':')
        return jm_fail(s, i, "expected ':'");
    i++;
    goto value;

after_value:
    if (depth == 0) {
        i = jm_ws(p, i, n);
        if (i != n)
            return jm_fail(s, i, "unexpected content after the document");
        return JM_OK;
    }
    if (depth == 1 && stack[0] == '{')
        jm_member_done(s, key_start, key_end, key_escaped, value_start, i);
    i = jm_ws(p, i, n);
    if (i >= n)
        return jm_fail(s, i, "unterminated object or array");
    if (p[i] == ',') {
        i = jm_ws(p, i + 1, n);
        if (stack[depth - 1] == '{')
            goto key;
        goto value;
    }
    if (p[i] == (stack[depth - 1] == '{' ? '}' : ']')) {
        i++;
        depth--;
        goto after_value;
    }
    return jm_fail(s, i, "expected ',' or a closing bracket");
}

#endif
