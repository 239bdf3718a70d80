/* The project's layout rules, read off the tree itself: every quoted include names its
 * room ("runtime/device.h"), a room includes only its own headers and those of the rooms
 * its CMake link list reaches (the same arrows the link check enforces on symbols, here on
 * headers, which a link never sees), and no source file passes 900 lines but the
 * verifier's rule table. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_ROOMS 32
#define MAX_LINE 900

typedef struct room {
    char name[32];
    char uses[MAX_ROOMS][32]; /* direct uses (rooms only; third-party libraries dropped) */
    int n_uses;
    bool reach[MAX_ROOMS];    /* transitive closure, itself included */
} room;

static room rooms[MAX_ROOMS];
static int n_rooms;

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    cr_assert(s);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

static int room_index(const char *name) {
    for (int i = 0; i < n_rooms; i++)
        if (!strcmp(rooms[i].name, name)) return i;
    return -1;
}

/* kiln_room(NAME USES dep ...) calls, dependencies kiln_x_y -> room "x-y" or "x_y". */
static void read_rooms(void) {
    char *cm = slurp(KILN_SOURCE_DIR "/CMakeLists.txt");
    cr_assert(cm, "CMakeLists.txt unreadable");
    for (char *p = cm; (p = strstr(p, "\nkiln_room(")); p++) {
        char *q = p + strlen("\nkiln_room(");
        char *end = strchr(q, ')');
        cr_assert(end);
        cr_assert_lt(n_rooms, MAX_ROOMS);
        room *r = &rooms[n_rooms++];
        memset(r, 0, sizeof *r);
        char word[32];
        int n = 0, k = 0;
        for (char *c = q; c <= end; c++) {
            bool sep = c == end || *c == ' ' || *c == '\n' || *c == '\t';
            if (!sep && n < (int)sizeof word - 1) {
                word[n++] = *c;
                continue;
            }
            if (!n) continue;
            word[n] = 0;
            n = 0;
            if (k++ == 0) memcpy(r->name, word, sizeof word);
            else if (!strncmp(word, "kiln_", 5)) memcpy(r->uses[r->n_uses++], word + 5, sizeof word - 5);
        }
    }
    free(cm);
    cr_assert_gt(n_rooms, 10, "found only %d kiln_room() calls", n_rooms);
    /* uses name targets (backend_ptx); rooms name folders (backend-ptx) */
    for (int i = 0; i < n_rooms; i++)
        for (int u = 0; u < rooms[i].n_uses; u++) {
            char *d = rooms[i].uses[u];
            if (room_index(d) >= 0) continue;
            for (char *c = d; *c; c++)
                if (*c == '_') *c = '-';
            cr_assert_geq(room_index(d), 0, "room %s uses kiln_%s, which is no room", rooms[i].name, d);
        }
    for (int i = 0; i < n_rooms; i++) rooms[i].reach[i] = true;
    for (bool grew = true; grew;) {
        grew = false;
        for (int i = 0; i < n_rooms; i++)
            for (int u = 0; u < rooms[i].n_uses; u++) {
                int d = room_index(rooms[i].uses[u]);
                for (int j = 0; j < n_rooms; j++)
                    if (rooms[d].reach[j] && !rooms[i].reach[j]) rooms[i].reach[j] = grew = true;
            }
    }
}

typedef struct findings {
    char text[8192];
    size_t len;
    int n;
} findings;

static void note(findings *f, const char *fmt, const char *a, const char *b, long c) {
    f->n++;
    if (f->len < sizeof f->text - 200)
        f->len += (size_t)snprintf(f->text + f->len, sizeof f->text - f->len, fmt, a, b, c);
}

static bool is_source(const char *name) {
    size_t n = strlen(name);
    return n > 2 && name[n - 2] == '.' && (name[n - 1] == 'c' || name[n - 1] == 'h');
}

/* Calls fn on every .c/.h under dir (relative to the source tree), recursively. */
static void each_source(const char *dir, void (*fn)(const char *rel, void *ctx), void *ctx) {
    char path[1024];
    if (snprintf(path, sizeof path, "%s/%s", KILN_SOURCE_DIR, dir) >= (int)sizeof path) return;
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char rel[1024], full[2048];
        if (snprintf(rel, sizeof rel, "%s/%s", dir, e->d_name) >= (int)sizeof rel ||
            snprintf(full, sizeof full, "%s/%s", KILN_SOURCE_DIR, rel) >= (int)sizeof full)
            continue;
        struct stat st;
        if (stat(full, &st)) continue;
        if (S_ISDIR(st.st_mode)) each_source(rel, fn, ctx);
        else if (is_source(e->d_name)) fn(rel, ctx);
    }
    closedir(d);
}

typedef struct inc_ctx {
    int room;    /* index of the room being checked; -1 for cli/ and tests/ (may use all) */
    findings f;
} inc_ctx;

static void check_includes(const char *rel, void *vctx) {
    inc_ctx *x = vctx;
    char full[2048];
    snprintf(full, sizeof full, "%s/%s", KILN_SOURCE_DIR, rel);
    char *s = slurp(full);
    cr_assert(s, "%s unreadable", rel);
    for (char *p = s; (p = strstr(p, "#include \"")); p++) {
        char *name = p + strlen("#include \""), *q = strchr(name, '"'), *slash = strchr(name, '/');
        if (!q) break;
        char target[64] = "";
        if (slash && slash < q && (size_t)(slash - name) < sizeof target) memcpy(target, name, (size_t)(slash - name));
        int t = target[0] ? room_index(target) : -1;
        bool test_helper = !strcmp(target, "tests") && x->room < 0;
        if (t < 0 && !test_helper && strcmp(target, "cli")) {
            *q = 0;
            note(&x->f, "  %s: #include \"%s\" names no room%.0ld\n", rel, name, 0);
        } else if (t >= 0 && x->room >= 0 && !rooms[x->room].reach[t]) {
            *q = 0;
            note(&x->f, "  %s: includes %s, a room its link list does not reach%.0ld\n", rel, name, 0);
        }
    }
    free(s);
}

Test(layout, includes_follow_the_link_graph) {
    read_rooms();
    inc_ctx x = {0};
    for (int i = 0; i < n_rooms; i++) {
        x.room = i;
        each_source(rooms[i].name, check_includes, &x);
    }
    x.room = -1;
    each_source("cli", check_includes, &x);
    each_source("tests", check_includes, &x);
    cr_assert_eq(x.f.n, 0, "%d includes break the rooms' rules:\n%s", x.f.n, x.f.text);
}

Test(layout, every_source_folder_is_a_room) {
    read_rooms();
    DIR *d = opendir(KILN_SOURCE_DIR);
    cr_assert(d);
    struct dirent *e;
    findings f = {0};
    while ((e = readdir(d))) {
        /* tools/: developer references outside kiln, built by nobody here (ARCHITECTURE.md) */
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "cli") || !strcmp(e->d_name, "tests") ||
            !strcmp(e->d_name, "tools") || !strncmp(e->d_name, "build", 5))
            continue;
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/%s", KILN_SOURCE_DIR, e->d_name);
        DIR *s = opendir(sub);
        if (!s) continue;
        bool has_c = false;
        struct dirent *c;
        while ((c = readdir(s)))
            if (is_source(c->d_name)) has_c = true;
        closedir(s);
        if (has_c && room_index(e->d_name) < 0)
            note(&f, "  %s/ holds C sources but is no kiln_room()%s%.0ld\n", e->d_name, "", 0);
    }
    closedir(d);
    cr_assert_eq(f.n, 0, "%s", f.text);
}

static void check_length(const char *rel, void *vctx) {
    findings *f = vctx;
    if (!strcmp(rel, "ir/verify.c")) return; /* the verifier's rule table */
    char full[2048];
    snprintf(full, sizeof full, "%s/%s", KILN_SOURCE_DIR, rel);
    char *s = slurp(full);
    long lines = 0;
    for (char *p = s; *p; p++) lines += *p == '\n';
    free(s);
    if (lines > MAX_LINE) note(f, "  %s: %s%ld lines\n", rel, "", lines);
}

Test(layout, no_source_file_over_900_lines) {
    read_rooms();
    findings f = {0};
    for (int i = 0; i < n_rooms; i++) each_source(rooms[i].name, check_length, &f);
    each_source("cli", check_length, &f);
    each_source("tests", check_length, &f);
    cr_assert_eq(f.n, 0, "%d files over %d lines:\n%s", f.n, MAX_LINE, f.text);
}
