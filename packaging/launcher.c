/*
 * drainhook's launcher: the file the kubelet runs (dist/drainhook/drainhook).
 *
 * A static executable, so it needs nothing from the image: no loader, no libc.
 * It finds its own folder, checks that the bundle beside it is complete, and
 * replaces itself (execve, same process: same PID, same start time, so the
 * hook's t0 stays the kernel's record of this process's start) with the glibc
 * loader carried in the bundle, which runs PyInstaller's bootloader with the
 * bundle's own libraries:
 *
 *   _internal/ld-linux-x86-64.so.2 --inhibit-cache --library-path DIR/_internal
 *       DIR/bootloader ARGS...
 *
 * The environment passed on is the one received, less LD_PRELOAD, LD_AUDIT and
 * LD_LIBRARY_PATH (an image's preloaded allocator built against a newer glibc
 * would kill the hook; the library path is the bundle's alone) and less any
 * PyInstaller variables, plus the three that make the bootloader skip its
 * restart through /proc (docs/packaging.md, "The launcher"), and LOCPATH and
 * GCONV_PATH naming the bundle's own locale folders.
 *
 * Exit 70 (EX_SOFTWARE), one line on stderr, when the bundle is incomplete or
 * cannot be run: never a loader's message. Under `wait` it first holds until D,
 * as drainhook/failsafe.py does for a broken install (CONTRACT §5): D from
 * --grace, --exit-reserve, --max-wait and their DRAINHOOK_* variables read
 * plainly (the defaults for what it cannot read: D = 25 s), counted from this
 * process's start, which is the hook's t0. A signal ends the hold at once (the
 * kernel's default). Built by scripts/build-binary with a generated
 * manifest.h (the bundle's files) and musl-gcc or gcc -static.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "manifest.h" /* LOADER, BOOTLOADER, CONTENTS, PYI_RESTART_LEVEL, BUNDLE[] */

#define EXIT_BUNDLE 70
#define NAME "drainhook"

extern char **environ;

static char **arguments;        /* the command line, for the fail-safe's D */
static struct timespec started; /* CLOCK_MONOTONIC at main: t0, to the launcher's start */

/* Seconds as the flags take them (1.5, 1.5s, 250ms, 2m), or -1: the syntax of
 * drainhook/failsafe.py's `seconds`, `\s*([0-9]*\.?[0-9]+([eE][+-]?[0-9]+)?)\s*(ms|s|m)?\s*`,
 * and a finite result (tests/test_failsafe.py holds the two to the same D). */
static double duration(const char *text)
{
    const char *p = text, *num;
    size_t before = 0, after = 0;
    double value, unit = 1;

    if (!text)
        return -1;
    while (isspace((unsigned char)*p))
        p++;
    for (num = p; isdigit((unsigned char)*p); p++)
        before++;
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p); p++)
            after++;
    if (after == 0 && (before == 0 || p[-1] == '.'))
        return -1; /* no digit, or a point with none after it */
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!isdigit((unsigned char)*p))
            return -1;
        while (isdigit((unsigned char)*p))
            p++;
    }
    errno = 0;
    value = strtod(num, NULL);
    if (errno && value > 1)
        return -1; /* past a double (an underflow is 0, as in Python) */
    while (isspace((unsigned char)*p))
        p++;
    if (strncmp(p, "ms", 2) == 0) {
        unit = 0.001;
        p += 2;
    } else if (*p == 'm' || *p == 's') {
        unit = *p == 'm' ? 60 : 1;
        p++;
    }
    while (isspace((unsigned char)*p))
        p++;
    value *= unit;
    return *p || value > 1.7976931348623157e308 ? -1 : value;
}

/* The last --flag V or --flag=V of the command line, else DRAINHOOK_<VAR>. */
static const char *flag_value(const char *flag, const char *var)
{
    const char *found = NULL;
    size_t len = strlen(flag), i;

    for (i = 1; arguments && arguments[i]; i++) {
        if (strcmp(arguments[i], "--") == 0)
            break;
        if (strcmp(arguments[i], flag) == 0 && arguments[i + 1])
            found = arguments[i + 1];
        else if (strncmp(arguments[i], flag, len) == 0 && arguments[i][len] == '=')
            found = arguments[i] + len + 1;
    }
    return found ? found : getenv(var);
}

/* D for `wait` that cannot run: read plainly, defaults for what cannot be read. */
static double deadline(void)
{
    double grace = duration(flag_value("--grace", "DRAINHOOK_GRACE"));
    double reserve = duration(flag_value("--exit-reserve", "DRAINHOOK_EXIT_RESERVE"));
    double cap = duration(flag_value("--max-wait", "DRAINHOOK_MAX_WAIT"));
    double d = (grace < 0 ? 30 : grace) - (reserve < 0 ? 5 : reserve);

    if (cap >= 0 && cap < d)
        d = cap;
    return d < 0 ? 0 : d;
}

/* Hold until D (less the 20 ms the Python hook leaves for its exit) from t0. */
static void hold(double d)
{
    double left;
    struct timespec now, pause;

    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        left = d - 0.02 - (double)(now.tv_sec - started.tv_sec)
            - (double)(now.tv_nsec - started.tv_nsec) / 1e9;
        if (left <= 0)
            return;
        if (left > 60)
            left = 60; /* in slices, as the Python hook sleeps: no overflow */
        pause.tv_sec = (time_t)left;
        pause.tv_nsec = (long)((left - (double)pause.tv_sec) * 1e9);
        nanosleep(&pause, NULL);
    }
}

/* Write what stderr takes now, never waiting (CONTRACT §5, as failsafe.write_now):
 * a stderr nobody reads loses the line, never time. A terminal's driver waits
 * for room inside a write that poll allowed: it is written through a file
 * description of its own, non-blocking (stderr's is shared); none, no line. */
static void say(const char *line)
{
    int fd = 2, own = -1;
    struct pollfd out = {2, POLLOUT, 0};
    size_t left = strlen(line);
    ssize_t n;

    if (isatty(2)) {
        own = open("/proc/self/fd/2", O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (own < 0)
            return;
        fd = out.fd = own;
    }
    while (left > 0 && poll(&out, 1, 0) == 1 && (out.revents & POLLOUT)) {
        n = write(fd, line, left < 4096 ? left : 4096);
        if (n <= 0)
            break;
        line += n;
        left -= (size_t)n;
    }
    if (own >= 0)
        close(own);
}

/* One line, then exit 70; under `wait`, the line says it holds, and it does. */
static void fail(const char *what, const char *path, const char *why)
{
    int waiting = arguments && arguments[1] && strcmp(arguments[1], "wait") == 0;
    double d = waiting ? deadline() : 0;
    char line[PATH_MAX + 512];
    int n = snprintf(line, sizeof line, NAME ": %s %s%s%s (exit 70)", what, path,
                     why ? ": " : "", why ? why : "");

    if (n > 0 && (size_t)n < sizeof line && waiting)
        snprintf(line + n, sizeof line - (size_t)n, "; holding as a blind sleep until D = %g s", d);
    strncat(line, "\n", sizeof line - strlen(line) - 1);
    say(line);
    if (waiting)
        hold(d);
    exit(EXIT_BUNDLE);
}

/* The folder of `candidate` with every symbolic link resolved, when it holds
 * the bundle's contents folder: 1 and the folder in `dir`; else 0. */
static int folder_of(const char *candidate, char dir[PATH_MAX])
{
    char real[PATH_MAX], contents[PATH_MAX];
    struct stat st;
    char *slash;

    if (!candidate || !candidate[0] || !realpath(candidate, real))
        return 0;
    slash = strrchr(real, '/');
    if (!slash)
        return 0;
    if (slash == real)
        slash[1] = 0; /* the launcher in / itself */
    else
        *slash = 0;
    if (snprintf(contents, sizeof contents, "%s/%s", real, CONTENTS) >= (int)sizeof contents)
        return 0;
    if (stat(contents, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0;
    memcpy(dir, real, strlen(real) + 1);
    return 1;
}

/* argv[0] without a slash: the first match on PATH, as a shell found it. */
static int folder_on_path(const char *name, char dir[PATH_MAX])
{
    const char *path = getenv("PATH");
    char candidate[PATH_MAX];

    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t len = strcspn(path, ":");
        if (len > 0 && len + strlen(name) + 2 <= sizeof candidate) {
            memcpy(candidate, path, len);
            candidate[len] = '/';
            strcpy(candidate + len + 1, name);
            if (access(candidate, X_OK) == 0)
                return folder_of(candidate, dir);
        }
        path += len + (path[len] == ':');
    }
    return 0;
}

/* Where the launcher lies: the path the kernel exec'd (AT_EXECFN), then
 * argv[0], then /proc/self/exe, the only one that needs /proc. Each is
 * resolved through symbolic links (a link in /usr/local/bin, an installed
 * copy) to the folder holding the bundle. */
static void locate(const char *argv0, char dir[PATH_MAX])
{
    const char *execfn = (const char *)getauxval(AT_EXECFN);

    if (execfn && strchr(execfn, '/') && folder_of(execfn, dir))
        return;
    if (argv0 && strchr(argv0, '/') && folder_of(argv0, dir))
        return;
    if (argv0 && argv0[0] && !strchr(argv0, '/') && folder_on_path(argv0, dir))
        return;
    if (folder_of("/proc/self/exe", dir))
        return;
    fail("cannot find its bundle: no folder", CONTENTS, "beside the launcher (copy the whole folder)");
}

static int dropped(const char *entry)
{
    static const char *const names[] = {
        "LD_PRELOAD=", "LD_AUDIT=", "LD_LIBRARY_PATH=", "LOCPATH=", "GCONV_PATH=", "_PYI_", "PYINSTALLER_",
    };
    size_t i;

    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strncmp(entry, names[i], strlen(names[i])) == 0)
            return 1;
    return 0;
}

static char *joined(const char *a, const char *b, const char *c)
{
    size_t len = strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = malloc(len);

    if (!s)
        fail("out of memory for", "a path", NULL);
    snprintf(s, len, "%s%s%s", a, b, c);
    return s;
}

int main(int argc, char **argv)
{
    char dir[PATH_MAX];
    char *loader, *bootloader, *contents, **args, **env;
    size_t i, n, count = 0;

    clock_gettime(CLOCK_MONOTONIC, &started);
    arguments = argv;
    locate(argv[0], dir);
    loader = joined(dir, "/", LOADER);
    bootloader = joined(dir, "/", BOOTLOADER);
    contents = joined(dir, "/", CONTENTS);

    /* Every file of the bundle, so that a partial copy is named here, in one
     * line, not by the loader or Python half-way through the start. */
    for (i = 0; BUNDLE[i]; i++) {
        char *path = joined(dir, "/", BUNDLE[i]);
        if (access(path, F_OK) != 0)
            fail("incomplete bundle: missing", path, NULL);
        free(path);
    }
    if (access(loader, X_OK) != 0)
        fail("cannot run", loader, strerror(errno));

    for (n = 0; environ && environ[n]; n++)
        ;
    env = calloc(n + 6, sizeof *env);
    args = calloc((size_t)argc + 6, sizeof *args);
    if (!env || !args)
        fail("out of memory for", "the environment", NULL);
    for (i = 0; i < n; i++)
        if (!dropped(environ[i]))
            env[count++] = environ[i];
    /* What PyInstaller's bootloader would set before restarting itself
     * through the loader named by /proc/self/exe: with them it takes itself
     * for the restarted process, does not restart, and names the process. */
    env[count++] = joined("_PYI_ARCHIVE_FILE=", bootloader, "");
    env[count++] = "_PYI_PARENT_PROCESS_LEVEL=" PYI_RESTART_LEVEL;
    env[count++] = "_PYI_LINUX_PROCESS_NAME=" NAME;
    /* The bundle's C.UTF-8 locale, and no character set converters from the
     * image: the locale files of another glibc are not read. */
    env[count++] = joined("LOCPATH=", contents, "/locale");
    env[count++] = joined("GCONV_PATH=", contents, "/gconv");
    env[count] = NULL;

    n = 0;
    args[n++] = loader;
    args[n++] = "--inhibit-cache";
    args[n++] = "--library-path";
    args[n++] = contents;
    args[n++] = bootloader;
    for (i = 1; argv[i]; i++)
        args[n++] = argv[i];
    args[n] = NULL;

    execve(loader, args, env);
    fail("cannot run", loader, strerror(errno));
    return EXIT_BUNDLE;
}
