#include "runtime/cache_dir.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int rt_cache_dir(char *buf, size_t cap) {
    const char *dir = getenv("KILN_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (dir && *dir) n = snprintf(buf, cap, "%s", dir);
    else if (xdg && *xdg) n = snprintf(buf, cap, "%s/kiln", xdg);
    else if (home && *home) n = snprintf(buf, cap, "%s/.cache/kiln", home);
    else return -1;
    if (n < 0 || (size_t)n >= cap) return -1;
    char parent[1024];
    snprintf(parent, sizeof parent, "%s", buf);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) *slash = 0, mkdir(parent, 0755); /* ~/.cache may not exist yet */
    mkdir(buf, 0755);
    struct stat st;
    return stat(buf, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

int rt_cache_write(const char *path, const void *data, size_t n) {
    char tmp[1200];
    if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >= (int)sizeof tmp) return -1;
    FILE *f = fopen(tmp, "wb");
    if (!f) return -1;
    bool ok = fwrite(data, 1, n, f) == n;
    if (fclose(f) != 0 || !ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}
