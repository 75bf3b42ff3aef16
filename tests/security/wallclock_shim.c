/* A stepped wall clock for one process tree, for tests: LD_PRELOAD this and name a file in
 * WALLCLOCK_SHIM_OFFSET_FILE; every read of the wall clock (CLOCK_REALTIME and its coarse
 * variant through clock_gettime, gettimeofday, time) gets the number of seconds the file holds
 * at that moment added, as if an admin or NTP had stepped the clock by that much. The other
 * clocks (CLOCK_MONOTONIC, CLOCK_BOOTTIME) are left alone, as a real step leaves them. The
 * system clock itself is never touched, so tests running beside it see nothing. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ns(void) {
    const char *path = getenv("WALLCLOCK_SHIM_OFFSET_FILE");
    if (path == NULL) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    return (long long)(strtod(buf, NULL) * 1e9);
}

static void shift(struct timespec *ts) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns();
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (real == NULL) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts);
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}
