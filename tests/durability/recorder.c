/* A write recorder for the power-loss harness (LD_PRELOAD).
 *
 * Every change a process makes under $AGENTLEDGER_POWER_ROOT is done for real
 * and then appended, as one record, to the shared log $AGENTLEDGER_POWER_LOG
 * (O_APPEND: one write() per record, so the records of all processes form one
 * order). Records: file data written (with the bytes), truncations, creations,
 * hard links, renames, unlinks, mkdir/rmdir, fallocate (growth only), and
 * fsync/fdatasync of a file or
 * of a directory, and sync()/syncfs(). tests/durability/image.py replays a
 * prefix of the log to build what a disk would hold after power was cut at
 * that point: only what a sync made durable (or, in the second mode, a seeded
 * random subset of the rest).
 *
 * The operation is done before its record is written, so a record never
 * claims a change that did not happen; a change whose record is missing
 * (the process was killed in between) counts as not durable. Writes through
 * mmap are not seen (SQLite's -shm file, rebuilt on recovery, is the only one).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { R_WRITE = 1, R_TRUNC, R_CREATE, R_LINK, R_RENAME, R_UNLINK, R_MKDIR, R_RMDIR,
       R_FSYNC, R_DIRSYNC, R_SYNCALL, R_EXTEND };

struct header {           /* followed by path1, path2 and data, lengths below */
    uint32_t magic;       /* 0x50574c31 "PWL1" */
    uint32_t kind;
    uint32_t pid;
    uint32_t len1;
    uint32_t len2;
    uint32_t pad;
    uint64_t ino;
    uint64_t offset;
    uint64_t datalen;
};

static char root[PATH_MAX];
static size_t root_len;
static int log_fd = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#define REAL(name, ret, ...) \
    static ret (*real_##name)(__VA_ARGS__); \
    if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name);

static void setup(void) {
    const char *r = getenv("AGENTLEDGER_POWER_ROOT");
    const char *l = getenv("AGENTLEDGER_POWER_LOG");
    if (!r || !l) return;
    snprintf(root, sizeof root, "%s", r);
    root_len = strlen(root);
    int (*real_open)(const char *, int, ...) = dlsym(RTLD_NEXT, "open");
    log_fd = real_open(l, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
}

static int active(void) {
    pthread_once(&once, setup);
    return log_fd >= 0;
}

static int under_root(const char *abs) {
    return strncmp(abs, root, root_len) == 0 && (abs[root_len] == '/' || abs[root_len] == 0);
}

/* The absolute path of the open file ``fd`` ("(deleted)" suffix and all). */
static int fd_path(int fd, char *out) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, PATH_MAX - 1);
    if (n < 0) return -1;
    out[n] = 0;
    return 0;
}

/* ``path`` relative to ``dirfd`` as an absolute path, without resolving its last part. */
static int abs_path(int dirfd, const char *path, char *out) {
    char base[PATH_MAX];
    if (path[0] == '/') {
        snprintf(base, sizeof base, "%s", path);
    } else {
        char dir[PATH_MAX];
        if (dirfd == AT_FDCWD) {
            if (!getcwd(dir, sizeof dir)) return -1;
        } else if (fd_path(dirfd, dir) < 0) {
            return -1;
        }
        snprintf(base, sizeof base, "%s/%s", dir, path);
    }
    /* resolve the parent directory (symlinks such as /tmp -> /private/tmp), keep the name */
    char *slash = strrchr(base, '/');
    char parent[PATH_MAX], resolved[PATH_MAX];
    if (slash == base) snprintf(parent, sizeof parent, "/");
    else { memcpy(parent, base, slash - base); parent[slash - base] = 0; }
    if (!realpath(parent, resolved)) return -1;
    snprintf(out, PATH_MAX, "%s/%s", strcmp(resolved, "/") ? resolved : "", slash + 1);
    return 0;
}

static void emit(uint32_t kind, uint64_t ino, uint64_t offset, const char *p1, const char *p2,
                 const void *data, uint64_t datalen) {
    struct header h = {0x50574c31, kind, (uint32_t)getpid(), p1 ? strlen(p1) : 0,
                       p2 ? strlen(p2) : 0, 0, ino, offset, datalen};
    struct iovec v[4] = {{&h, sizeof h}, {(void *)p1, h.len1}, {(void *)p2, h.len2},
                         {(void *)data, datalen}};
    size_t total = sizeof h + h.len1 + h.len2 + datalen;
    char *buf = malloc(total);
    if (!buf) abort();
    size_t at = 0;
    for (int i = 0; i < 4; i++) { memcpy(buf + at, v[i].iov_base, v[i].iov_len); at += v[i].iov_len; }
    int saved = errno;
    ssize_t (*real_write)(int, const void *, size_t) = dlsym(RTLD_NEXT, "write");
    if (real_write(log_fd, buf, total) != (ssize_t)total) abort(); /* a short log is useless */
    errno = saved;
    free(buf);
}

/* If ``fd`` is a regular file or directory under the root: its inode (and path). */
static int tracked_fd(int fd, uint64_t *ino, int *is_dir, char *path) {
    struct stat st;
    if (!active() || fd == log_fd || fstat(fd, &st) != 0) return 0;
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return 0;
    char p[PATH_MAX];
    if (fd_path(fd, p) < 0 || !under_root(p)) return 0;
    *ino = st.st_ino;
    if (is_dir) *is_dir = S_ISDIR(st.st_mode);
    if (path) snprintf(path, PATH_MAX, "%s", p);
    return 1;
}

static void data_written(int fd, const void *buf, ssize_t n, off_t offset) {
    uint64_t ino;
    if (n > 0 && tracked_fd(fd, &ino, NULL, NULL)) emit(R_WRITE, ino, offset, NULL, NULL, buf, n);
}

static void iov_written(int fd, const struct iovec *iov, int cnt, ssize_t n, off_t offset) {
    uint64_t ino;
    if (n <= 0 || !tracked_fd(fd, &ino, NULL, NULL)) return;
    for (int i = 0; i < cnt && n > 0; i++) {
        size_t part = iov[i].iov_len < (size_t)n ? iov[i].iov_len : (size_t)n;
        emit(R_WRITE, ino, offset, NULL, NULL, iov[i].iov_base, part);
        offset += part;
        n -= part;
    }
}

/* ------------------------------------------------------------ opening files */

static int opened(int dirfd, const char *path, int flags, int fd, int existed) {
    if (fd < 0 || !active()) return fd;
    uint64_t ino;
    char p[PATH_MAX];
    if (!tracked_fd(fd, &ino, NULL, p)) return fd;
    if (!existed) {
        char a[PATH_MAX];
        if (abs_path(dirfd, path, a) == 0) emit(R_CREATE, ino, 0, a, NULL, NULL, 0);
    } else if (flags & O_TRUNC) {
        emit(R_TRUNC, ino, 0, NULL, NULL, NULL, 0);
    }
    return fd;
}

static int exists_at(int dirfd, const char *path) {
    struct stat st;
    return fstatat(dirfd, path, &st, 0) == 0;
}

#define OPEN_BODY(call, dirfd)                                         \
    mode_t mode = 0;                                                   \
    if (flags & (O_CREAT | __O_TMPFILE)) {                             \
        va_list ap; va_start(ap, flags); mode = va_arg(ap, int); va_end(ap); \
    }                                                                  \
    int existed = (flags & O_CREAT) ? exists_at(dirfd, path) : 1;      \
    int fd = call;                                                     \
    return opened(dirfd, path, flags, fd, existed);

int open(const char *path, int flags, ...) {
    REAL(open, int, const char *, int, ...);
    OPEN_BODY(real_open(path, flags, mode), AT_FDCWD)
}
int open64(const char *path, int flags, ...) {
    REAL(open64, int, const char *, int, ...);
    OPEN_BODY(real_open64(path, flags, mode), AT_FDCWD)
}
int openat(int dirfd, const char *path, int flags, ...) {
    REAL(openat, int, int, const char *, int, ...);
    OPEN_BODY(real_openat(dirfd, path, flags, mode), dirfd)
}
int openat64(int dirfd, const char *path, int flags, ...) {
    REAL(openat64, int, int, const char *, int, ...);
    OPEN_BODY(real_openat64(dirfd, path, flags, mode), dirfd)
}
int creat(const char *path, mode_t mode) {
    return open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
}
int creat64(const char *path, mode_t mode) {
    return open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
}

/* stdio opens and writes inside glibc, unseen: a stream opened for writing is
 * logged as created (or truncated) here, and its whole content when it is closed */
static FILE *stream_opened(const char *path, const char *mode, FILE *f, int existed) {
    if (f && strpbrk(mode, "wa+")) opened(AT_FDCWD, path, mode[0] == 'w' ? O_TRUNC : 0,
                                          fileno(f), existed);
    return f;
}
FILE *fopen(const char *path, const char *mode) {
    REAL(fopen, FILE *, const char *, const char *);
    int existed = active() ? exists_at(AT_FDCWD, path) : 1;
    return stream_opened(path, mode, real_fopen(path, mode), existed);
}
FILE *fopen64(const char *path, const char *mode) {
    REAL(fopen64, FILE *, const char *, const char *);
    int existed = active() ? exists_at(AT_FDCWD, path) : 1;
    return stream_opened(path, mode, real_fopen64(path, mode), existed);
}
int fclose(FILE *f) {
    REAL(fclose, int, FILE *);
    uint64_t ino;
    int fd = fileno(f);
    if (fd >= 0 && (fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDONLY && fflush(f) == 0 &&
        tracked_fd(fd, &ino, NULL, NULL)) {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        int in = open(link, O_RDONLY | O_CLOEXEC); /* the stream may be write-only */
        struct stat st;
        if (in < 0 || fstat(in, &st) != 0) abort(); /* a stream we cannot read back */
        char *all = malloc(st.st_size + 1);
        if (!all || pread(in, all, st.st_size, 0) != st.st_size) abort();
        close(in);
        emit(R_TRUNC, ino, 0, NULL, NULL, NULL, 0);
        emit(R_WRITE, ino, 0, NULL, NULL, all, st.st_size);
        free(all);
    }
    return real_fclose(f);
}

/* ------------------------------------------------------------ file data */

ssize_t write(int fd, const void *buf, size_t count) {
    REAL(write, ssize_t, int, const void *, size_t);
    ssize_t n = real_write(fd, buf, count);
    if (n > 0 && active() && fd > 2) {
        off_t end = lseek(fd, 0, SEEK_CUR);
        if (end >= 0) data_written(fd, buf, n, end - n);
    }
    return n;
}
ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite, ssize_t, int, const void *, size_t, off_t);
    ssize_t n = real_pwrite(fd, buf, count, offset);
    data_written(fd, buf, n, offset);
    return n;
}
ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite64, ssize_t, int, const void *, size_t, off_t);
    ssize_t n = real_pwrite64(fd, buf, count, offset);
    data_written(fd, buf, n, offset);
    return n;
}
ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    REAL(writev, ssize_t, int, const struct iovec *, int);
    ssize_t n = real_writev(fd, iov, cnt);
    if (n > 0 && active() && fd > 2) {
        off_t end = lseek(fd, 0, SEEK_CUR);
        if (end >= 0) iov_written(fd, iov, cnt, n, end - n);
    }
    return n;
}
ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t offset) {
    REAL(pwritev, ssize_t, int, const struct iovec *, int, off_t);
    ssize_t n = real_pwritev(fd, iov, cnt, offset);
    iov_written(fd, iov, cnt, n, offset);
    return n;
}
ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t offset) {
    REAL(pwritev64, ssize_t, int, const struct iovec *, int, off_t);
    ssize_t n = real_pwritev64(fd, iov, cnt, offset);
    iov_written(fd, iov, cnt, n, offset);
    return n;
}
ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t offset, int flags) {
    REAL(pwritev2, ssize_t, int, const struct iovec *, int, off_t, int);
    ssize_t n = real_pwritev2(fd, iov, cnt, offset, flags);
    if (offset == -1) {
        off_t end = n > 0 ? lseek(fd, 0, SEEK_CUR) : -1;
        if (end >= 0) iov_written(fd, iov, cnt, n, end - n);
    } else {
        iov_written(fd, iov, cnt, n, offset);
    }
    return n;
}

static void truncated(int fd, off_t length) {
    uint64_t ino;
    if (tracked_fd(fd, &ino, NULL, NULL)) emit(R_TRUNC, ino, length, NULL, NULL, NULL, 0);
}
int ftruncate(int fd, off_t length) {
    REAL(ftruncate, int, int, off_t);
    int r = real_ftruncate(fd, length);
    if (r == 0) truncated(fd, length);
    return r;
}
int ftruncate64(int fd, off_t length) {
    REAL(ftruncate64, int, int, off_t);
    int r = real_ftruncate64(fd, length);
    if (r == 0) truncated(fd, length);
    return r;
}
static void allocated(int fd, int mode, off_t offset, off_t len) {
    uint64_t ino;
    if (!tracked_fd(fd, &ino, NULL, NULL)) return;
    if (mode != 0) abort(); /* keep-size, hole punching, zero ranges: unmodelled */
    emit(R_EXTEND, ino, offset + len, NULL, NULL, NULL, 0);
}
int fallocate(int fd, int mode, off_t offset, off_t len) {
    REAL(fallocate, int, int, int, off_t, off_t);
    int r = real_fallocate(fd, mode, offset, len);
    if (r == 0) allocated(fd, mode, offset, len);
    return r;
}
int fallocate64(int fd, int mode, off_t offset, off_t len) {
    REAL(fallocate64, int, int, int, off_t, off_t);
    int r = real_fallocate64(fd, mode, offset, len);
    if (r == 0) allocated(fd, mode, offset, len);
    return r;
}
int posix_fallocate(int fd, off_t offset, off_t len) {
    REAL(posix_fallocate, int, int, off_t, off_t);
    int r = real_posix_fallocate(fd, offset, len);
    if (r == 0) allocated(fd, 0, offset, len);
    return r;
}
int posix_fallocate64(int fd, off_t offset, off_t len) {
    REAL(posix_fallocate64, int, int, off_t, off_t);
    int r = real_posix_fallocate64(fd, offset, len);
    if (r == 0) allocated(fd, 0, offset, len);
    return r;
}
int truncate(const char *path, off_t length) {
    int fd = open(path, O_WRONLY);
    if (fd < 0) return -1;
    int r = ftruncate(fd, length);
    int saved = errno;
    close(fd);
    errno = saved;
    return r;
}

ssize_t sendfile(int out, int in, off_t *offset, size_t count) {
    /* copied bytes are not visible here: a tracked destination is refused loudly */
    REAL(sendfile, ssize_t, int, int, off_t *, size_t);
    uint64_t ino;
    if (tracked_fd(out, &ino, NULL, NULL)) { errno = EINVAL; return -1; }
    return real_sendfile(out, in, offset, count);
}
ssize_t copy_file_range(int in, off_t *oin, int out, off_t *oout, size_t len, unsigned flags) {
    REAL(copy_file_range, ssize_t, int, off_t *, int, off_t *, size_t, unsigned);
    uint64_t ino;
    if (tracked_fd(out, &ino, NULL, NULL)) { errno = EXDEV; return -1; }
    return real_copy_file_range(in, oin, out, oout, len, flags);
}

/* ------------------------------------------------------------ syncs */

static void synced(int fd) {
    uint64_t ino;
    int is_dir;
    char p[PATH_MAX];
    if (!tracked_fd(fd, &ino, &is_dir, p)) return;
    if (is_dir) emit(R_DIRSYNC, ino, 0, p, NULL, NULL, 0);
    else emit(R_FSYNC, ino, 0, NULL, NULL, NULL, 0);
}
int fsync(int fd) {
    REAL(fsync, int, int);
    int r = real_fsync(fd);
    if (r == 0) synced(fd);
    return r;
}
int fdatasync(int fd) {
    REAL(fdatasync, int, int);
    int r = real_fdatasync(fd);
    if (r == 0) synced(fd);
    return r;
}
void sync(void) {
    REAL(sync, void, void);
    real_sync();
    if (active()) emit(R_SYNCALL, 0, 0, NULL, NULL, NULL, 0);
}
int syncfs(int fd) {
    REAL(syncfs, int, int);
    int r = real_syncfs(fd);
    if (r == 0 && active()) emit(R_SYNCALL, 0, 0, NULL, NULL, NULL, 0);
    return r;
}

/* ------------------------------------------------------------ names */

static int lstat_ino(int dirfd, const char *path, uint64_t *ino) {
    struct stat st;
    if (fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) != 0) return -1;
    *ino = st.st_ino;
    return 0;
}

static void named(uint32_t kind, int d1, const char *p1, int d2, const char *p2, uint64_t ino) {
    char a[PATH_MAX], b[PATH_MAX];
    if (!active() || abs_path(d1, p1, a) != 0) return;
    if (p2 && abs_path(d2, p2, b) != 0) return;
    if (!under_root(a) && !(p2 && under_root(b))) return;
    emit(kind, ino, 0, a, p2 ? b : NULL, NULL, 0);
}

int renameat2(int od, const char *o, int nd, const char *n, unsigned flags) {
    REAL(renameat2, int, int, const char *, int, const char *, unsigned);
    uint64_t ino = 0;
    if (active()) lstat_ino(od, o, &ino);
    int r = real_renameat2(od, o, nd, n, flags);
    if (r == 0) {
        if (flags & RENAME_EXCHANGE) abort(); /* unmodelled */
        named(R_RENAME, od, o, nd, n, ino);
    }
    return r;
}
int renameat(int od, const char *o, int nd, const char *n) { return renameat2(od, o, nd, n, 0); }
int rename(const char *o, const char *n) { return renameat2(AT_FDCWD, o, AT_FDCWD, n, 0); }

int linkat(int od, const char *o, int nd, const char *n, int flags) {
    REAL(linkat, int, int, const char *, int, const char *, int);
    int r = real_linkat(od, o, nd, n, flags);
    uint64_t ino = 0;
    if (r == 0 && active() && lstat_ino(nd, n, &ino) == 0) named(R_LINK, od, o, nd, n, ino);
    return r;
}
int link(const char *o, const char *n) { return linkat(AT_FDCWD, o, AT_FDCWD, n, 0); }

int unlinkat(int dirfd, const char *path, int flags) {
    REAL(unlinkat, int, int, const char *, int);
    char a[PATH_MAX];
    int have = active() && abs_path(dirfd, path, a) == 0;
    int r = real_unlinkat(dirfd, path, flags);
    if (r == 0 && have && under_root(a))
        emit((flags & AT_REMOVEDIR) ? R_RMDIR : R_UNLINK, 0, 0, a, NULL, NULL, 0);
    return r;
}
int unlink(const char *path) { return unlinkat(AT_FDCWD, path, 0); }
int rmdir(const char *path) { return unlinkat(AT_FDCWD, path, AT_REMOVEDIR); }

int mkdirat(int dirfd, const char *path, mode_t mode) {
    REAL(mkdirat, int, int, const char *, mode_t);
    int r = real_mkdirat(dirfd, path, mode);
    uint64_t ino = 0;
    if (r == 0 && active() && lstat_ino(dirfd, path, &ino) == 0)
        named(R_MKDIR, dirfd, path, 0, NULL, ino);
    return r;
}
int mkdir(const char *path, mode_t mode) { return mkdirat(AT_FDCWD, path, mode); }
