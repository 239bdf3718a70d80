#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const char *tu_testdata(void) {
    const char *d = getenv("KILN_TESTDATA");
    if (!d || !*d) d = KILN_TESTDATA_DIR;
    struct stat st;
    if (stat(d, &st) != 0 || !S_ISDIR(st.st_mode)) {
        const char *req = getenv("KILN_REQUIRE_TESTDATA");
        if (req && strcmp(req, "1") == 0)
            cr_assert_fail("test data folder %s is absent and KILN_REQUIRE_TESTDATA=1", d);
        cr_skip_test("test data folder %s is absent", d);
    }
    return d;
}

const char *tu_data_file(const char *rel) {
    static char buf[8][1024];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 1024, "%s/%s", tu_testdata(), rel);
    if (access(p, R_OK) != 0) cr_assert_fail("test data file %s is missing", p);
    return p;
}

int tu_each_gguf(const char *dir, void (*fn)(const char *path, void *ctx), void *ctx) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot list %s", dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf")) continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        fn(p, ctx);
        n++;
    }
    closedir(d);
    return n;
}

static char tmpdir[256];

static void rm_tmpdir(void) {
    if (!tmpdir[0]) return;
    DIR *d = opendir(tmpdir);
    if (d) {
        struct dirent *e;
        char p[600];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(tmpdir);
}

const char *tu_tmpdir(void) {
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/kiln-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) cr_assert_fail("mkdtemp failed");
        atexit(rm_tmpdir);
    }
    return tmpdir;
}

const char *tu_tmp(const char *name) {
    static char buf[8][600];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 600, "%s/%s", tu_tmpdir(), name);
    return p;
}

void tu_put(tu_buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        cr_assert(b->p);
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

void tu_u32(tu_buf *b, uint32_t v) { tu_put(b, &v, 4); }
void tu_u64(tu_buf *b, uint64_t v) { tu_put(b, &v, 8); }
void tu_str(tu_buf *b, const char *s) {
    tu_u64(b, strlen(s));
    tu_put(b, s, strlen(s));
}
void tu_pad(tu_buf *b, size_t align) {
    static const uint8_t z[64];
    while (b->n % align) tu_put(b, z, 1);
}
void tu_free(tu_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

void tu_header(tu_buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    tu_put(b, "GGUF", 4);
    tu_u32(b, version);
    tu_u64(b, n_tensors);
    tu_u64(b, n_kv);
}

void tu_kv_u32(tu_buf *b, const char *key, uint32_t v) {
    tu_str(b, key);
    tu_u32(b, 4);
    tu_u32(b, v);
}

void tu_kv_str(tu_buf *b, const char *key, const char *v) {
    tu_str(b, key);
    tu_u32(b, 8);
    tu_str(b, v);
}

void tu_tensor_info(tu_buf *b, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1, uint64_t offset) {
    tu_str(b, name);
    tu_u32(b, ne1 ? 2 : 1);
    tu_u64(b, ne0);
    if (ne1) tu_u64(b, ne1);
    tu_u32(b, type);
    tu_u64(b, offset);
}

bool tu_write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static void slurp(int fd, char *buf, size_t cap) {
    size_t n = 0;
    char tmp[4096];
    ssize_t k;
    while ((k = read(fd, tmp, sizeof tmp)) > 0)
        for (ssize_t i = 0; i < k; i++)
            if (buf && n + 1 < cap) buf[n++] = tmp[i];
    if (buf && cap) buf[n] = 0;
}

int tu_run_kiln(const char *const *args, char *out, size_t out_cap, char *errbuf, size_t err_cap) {
    return tu_run_kiln_input(args, NULL, out, out_cap, errbuf, err_cap);
}

int tu_run_kiln_input(const char *const *args, const char *input, char *out, size_t out_cap, char *errbuf,
                      size_t err_cap) {
    char ip[600] = "/dev/null";
    if (input) {
        snprintf(ip, sizeof ip, "%s/in-XXXXXX", tu_tmpdir());
        int ifd = mkstemp(ip);
        cr_assert(ifd >= 0);
        size_t len = strlen(input);
        cr_assert_eq(write(ifd, input, len), (ssize_t)len);
        close(ifd);
    }
    char op[600], ep[600];
    snprintf(op, sizeof op, "%s/out-XXXXXX", tu_tmpdir());
    snprintf(ep, sizeof ep, "%s/err-XXXXXX", tu_tmpdir());
    int ofd = mkstemp(op), efd = mkstemp(ep);
    cr_assert(ofd >= 0 && efd >= 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int argc = 0;
        while (args[argc]) argc++;
        char **argv = calloc((size_t)argc + 2, sizeof *argv);
        /* $KILN_BIN: the binary when the tree was moved since the build (a device copy) */
        const char *bin = getenv("KILN_BIN") && *getenv("KILN_BIN") ? getenv("KILN_BIN") : KILN_BIN;
        argv[0] = (char *)bin;
        for (int i = 0; i < argc; i++) argv[i + 1] = (char *)args[i];
        int in = open(ip, O_RDONLY);
        dup2(in, 0);
        dup2(ofd, 1);
        dup2(efd, 2);
        execv(bin, argv);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    lseek(ofd, 0, SEEK_SET);
    lseek(efd, 0, SEEK_SET);
    slurp(ofd, out, out_cap);
    slurp(efd, errbuf, err_cap);
    close(ofd);
    close(efd);
    unlink(op);
    unlink(ep);
    if (input) unlink(ip);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

const char *tu_synth_tiny(const char *name, const char *arch, const char *dtype) {
    const char *path = tu_tmp(name);
    char err[4096];
    int rc = tu_run_kiln(
        (const char *const[]){"synth", "--preset", "tiny", "--arch", arch, "--dtype", dtype, "-o", path, NULL}, NULL, 0,
        err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    return path;
}
