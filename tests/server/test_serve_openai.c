/* kiln serve through the official openai Python client: tests/server/openai/openai_client.py,
 * run from a virtual environment under the build folder (<build>/venv-openai) that the
 * first run creates with the versions pinned in tests/server/openai/requirements.txt and
 * constraints.txt; later runs reuse it while those pins are unchanged. Without python3
 * venv support or without access to PyPI the tests skip (and fail under
 * KILN_REQUIRE_TESTDATA=1). */
#include "tests/util/testutil.h"
#include "tests/util/testutil_serve.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static ts_server srv = {.pid = -1};

static void fini(void) { ts_kill(&srv); }

/* A first run downloads and installs the client (bounded by the timeouts below). */
TestSuite(serve_openai, .fini = fini, .timeout = 300);

#define VENV_TIMEOUT "60"
#define PIP_TIMEOUT "180"
#define SCRIPT_TIMEOUT "150"

static const char *source_dir(void) {
    const char *d = getenv("KILN_SOURCE_DIR");
    return d && *d ? d : KILN_SOURCE_DIR;
}

/* $KILN_BUILD_DIR, else the folder of the kiln binary. */
static const char *build_dir(void) {
    static char dir[1024];
    const char *d = getenv("KILN_BUILD_DIR");
    if (d && *d) return d;
    const char *bin = getenv("KILN_BIN") && *getenv("KILN_BIN") ? getenv("KILN_BIN") : KILN_BIN;
    snprintf(dir, sizeof dir, "%s", bin);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    return dir;
}

static const char *system_python(void) {
    const char *p = getenv("KILN_PYTHON");
    if (p && *p) return p;
    return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

/* Runs argv (a PATH search for argv[0]) with stdout and stderr into out (NUL-terminated,
 * the last cap-1 bytes kept). The exit status, or -1 when it did not exit normally. */
static int run_cmd(const char *const *argv, char *out, size_t cap) {
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(p[0]);
        close(p[1]);
        setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1", 1);
        setenv("PIP_NO_INPUT", "1", 1);
        setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(p[1]);
    size_t n = 0;
    char tmp[4096];
    ssize_t k;
    while ((k = read(p[0], tmp, sizeof tmp)) > 0 || (k < 0 && errno == EINTR)) {
        for (ssize_t i = 0; i < k; i++) {
            if (n + 1 >= cap) { /* keep the tail: errors come last */
                memmove(out, out + cap / 2, n - cap / 2);
                n -= cap / 2;
            }
            out[n++] = tmp[i];
        }
    }
    out[n] = 0;
    close(p[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(n > 0 ? (size_t)n + 1 : 1);
    size_t got = b && n > 0 ? fread(b, 1, (size_t)n, f) : 0;
    if (b) b[got] = 0;
    fclose(f);
    return b;
}

/* The pins the venv was made from: requirements.txt then constraints.txt. */
static char *pins(void) {
    char p[1200];
    snprintf(p, sizeof p, "%s/tests/server/openai/requirements.txt", source_dir());
    char *req = slurp(p);
    snprintf(p, sizeof p, "%s/tests/server/openai/constraints.txt", source_dir());
    char *con = slurp(p);
    cr_assert(req && con, "tests/server/openai/requirements.txt or constraints.txt is missing under %s", source_dir());
    size_t n = strlen(req) + strlen(con) + 1;
    char *all = malloc(n);
    snprintf(all, n, "%s%s", req, con);
    free(req);
    free(con);
    return all;
}

static void skip_or_fail(const char *why) {
    const char *req = getenv("KILN_REQUIRE_TESTDATA");
    if (req && !strcmp(req, "1")) cr_assert_fail("the openai client could not be installed: %s", why);
    cr_skip_test("the openai client could not be installed: %s", why);
}

/* <build>/venv-openai's python with the pinned client, made when missing or stale. One
 * test at a time (a lock file), and after a failed install the others of the same run
 * skip at once with its reason instead of trying again. */
static const char *venv_python(void) {
    static char venv[1100], python[1200];
    char lock[1200], stamp[1200], failed[1200], req[1200];
    snprintf(venv, sizeof venv, "%s/venv-openai", build_dir());
    snprintf(python, sizeof python, "%s/bin/python", venv);
    snprintf(lock, sizeof lock, "%s.lock", venv);
    snprintf(stamp, sizeof stamp, "%s/kiln-pins.txt", venv);
    snprintf(failed, sizeof failed, "%s.failed", venv);
    snprintf(req, sizeof req, "%s/tests/server/openai/requirements.txt", source_dir());
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    cr_assert(lfd >= 0, "cannot create %s: %s", lock, strerror(errno));
    while (flock(lfd, LOCK_EX) != 0 && errno == EINTR) {}
    char *want = pins(), *have = slurp(stamp);
    bool ready = have && !strcmp(want, have) && access(python, X_OK) == 0;
    free(have);
    if (ready) {
        free(want);
        close(lfd);
        return python;
    }
    struct stat st;
    if (stat(failed, &st) == 0 && time(NULL) - st.st_mtime < 60) {
        char *why = slurp(failed);
        close(lfd);
        free(want);
        skip_or_fail(why ? why : "an earlier attempt failed");
    }
    static char out[8192];
    char why[9000];
    int rc = run_cmd((const char *const[]){"rm", "-rf", venv, NULL}, out, sizeof out);
    if (rc == 0)
        rc = run_cmd((const char *const[]){"timeout", VENV_TIMEOUT, system_python(), "-m", "venv", venv, NULL}, out,
                     sizeof out);
    if (rc != 0) {
        snprintf(why, sizeof why, "'%s -m venv' failed (exit %d; Debian: apt-get install python3-venv): %s",
                 system_python(), rc, out);
    } else {
        rc = run_cmd((const char *const[]){"timeout", PIP_TIMEOUT, python, "-m", "pip", "install", "-q",
                                           "--only-binary=:all:", "--timeout", "20", "--retries", "1", "-r", req,
                                           NULL},
                     out, sizeof out);
        if (rc != 0)
            snprintf(why, sizeof why, "pip install -r tests/server/openai/requirements.txt failed (exit %d%s): %s", rc,
                     rc == 124 ? ", timed out" : "", out);
    }
    if (rc != 0) {
        FILE *f = fopen(failed, "w");
        if (f) {
            fputs(why, f);
            fclose(f);
        }
        close(lfd);
        free(want);
        skip_or_fail(why);
    }
    FILE *f = fopen(stamp, "w");
    cr_assert(f);
    fputs(want, f);
    fclose(f);
    unlink(failed);
    free(want);
    close(lfd);
    return python;
}

/* The script name against a server of model started with server_args (NULL-terminated, or NULL). */
static void script_against_server(const char *name, const char *model, const char *id, const char *extra,
                                  const char *const *server_args) {
    const char *python = venv_python();
    ts_start(&srv, model, server_args, NULL);
    char url[64], script[1200];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", srv.port);
    snprintf(script, sizeof script, "%s/tests/server/openai/%s", source_dir(), name);
    static char out[1 << 16];
    int rc = run_cmd((const char *const[]){"timeout", SCRIPT_TIMEOUT, python, script, "--base-url", url, "--api-key",
                                           TS_KEY, "--model", id, extra, NULL},
                     out, sizeof out);
    cr_assert_eq(rc, 0, "%s against %s exited %d:\n%s", name, id, rc, out);
    cr_assert(ts_alive(&srv), "the server died");
}

static void script_against(const char *name, const char *model, const char *id, const char *extra) {
    script_against_server(name, model, id, extra, NULL);
}

static void client_against(const char *model, const char *id) {
    script_against("openai_client.py", model, id, NULL);
}

Test(serve_openai, stories260K) { client_against(tu_data_file("models/stories260K.gguf"), "stories260K"); }

Test(serve_openai, tiny) { client_against(tu_synth_tiny("tiny.gguf", "llama", "f16"), "tiny"); }

/* Structured output, tool calls (a two-turn loop, streamed), reasoning content and a fuzz
 * of schemas and tool definitions (tests/server/openai/openai_agent.py), on a random
 * model with Qwen3's tokenizer and chat template: only what the server enforces can make
 * its output valid. */
Test(serve_openai, agent_api_qwen3) {
    static char out[1 << 14], err[1 << 14];
    const char *path = tu_tmp("agent_qwen3.gguf");
    int rc = tu_run_kiln((const char *const[]){"synth", "--preset", "tiny", "--layers", "1", "--hidden", "64", "--heads",
                                               "2", "--kv-heads", "1", "--ffn", "96", "--tokenizer",
                                               tu_data_file("tokenizers/qwen3/tokenizer.json"), "--tokenizer-config",
                                               tu_data_file("tokenizers/qwen3/tokenizer_config.json"), "-o", path, NULL},
                         out, sizeof out, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
#ifdef KILN_SANITIZED
    script_against("openai_agent.py", path, "agent_qwen3", "--quick"); /* a sanitized server is several times slower */
#else
    script_against("openai_agent.py", path, "agent_qwen3", NULL);
#endif
}

/* Eight threads streaming at once through the client against four slots on a GPU plan
 * (lavapipe in CI: the slots' tokens in one step), each as the request alone. */
Test(serve_openai, parallel_streams_on_the_gpu) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    d->ops->destroy(d);
    script_against_server("openai_parallel.py", tu_data_file("models/stories260K.gguf"), "stories260K", NULL,
                          (const char *const[]){"--parallel", "4", "--queue", "8", "--device", "vulkan:0", NULL});
}
