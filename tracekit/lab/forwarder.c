/* The emulated path's forwarder: moves IP packets between two TUN devices
 * and decides, per direction, what the path does to each one.
 *
 * The decisions are tracekit.lab.wan's model (Link, ScriptedLoss, Rng),
 * written again here so that a path of hundreds of Mbit/s holds its schedule
 * (the model in Python keeps up with about 40 Mbit/s). Every draw happens in
 * the same order and every time is computed with the same double-precision
 * expressions as in the model, so the two make the same decision for every
 * packet; tests/test_forwarder.py holds them to that, packet by packet
 * (`--model` mode below).
 *
 *   forwarder FD_CLIENT FD_SERVER CONFIG DROPS DELIVERIES STATS
 *       forward until SIGTERM; CONFIG is wan.py's key/value file; DROPS and
 *       DELIVERIES get fixed-size binary records (wan.py turns them into
 *       JSON lines), STATS a JSON object at the end.
 *   forwarder --model CONFIG < packets > decisions
 *       the decisions alone, for given times (no devices, no clock).
 *
 * Per direction, arrivals never decrease (a constant delay after a FIFO
 * bottleneck; jitter is held back behind the packet before), so each
 * direction's delay line is a ring of packet slots in arrival order.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define SLOT 2048          /* a TUN read never exceeds the MTU (1500) */
#define SLOTS 65536        /* per direction: 131 MB of address space, touched as used */
#define READ_BURST 64      /* packets read from one device before delivering what is due */
#define WRITE_BURST 8      /* packets delivered before reading again */
#define SPIN_S 0.00002     /* poll without sleeping when the next packet is due this soon */
#define HEAD 60            /* bytes of each packet kept in the logs */
#define LOG_BUFFER (1 << 20)
#define MAX_RULES 64
#define MAX_CONNS 4096

enum { UP, DOWN };
enum { PASS, LOSS, BURST_LOSS, QUEUE, SCRIPTED, FULL, DEVICE, NREASONS };
/* FULL: the forwarder's own delay line had no free slot; DEVICE: the receiving
 * TUN device refused the write (it was not up yet) (neither is part of the model; both counted) */
static const char *reason_name[] = {"", "loss", "burst_loss", "queue", "scripted", "forwarder_full",
                                    "device_refused"};
static const char *dir_name[] = {"up", "down"};

/* ---- the model: tracekit.lab.wan.Rng, Link and ScriptedLoss ---- */

typedef struct { uint64_t state; } rng_t;

static double uniform(rng_t *r)  /* splitmix64, top 53 bits */
{
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

typedef struct { uint32_t seq; int times; int conn; } rule_t;
typedef struct { uint8_t key[12]; uint32_t isn; int ordinal; int sent[MAX_RULES]; } conn_t;

typedef struct {
    double delay_ms, loss, jitter_ms, burst_p, burst_r, burst_loss, rate_mbps;
    long queue_bytes, bucket_bytes;
    rng_t rng;
    int bad;
    double busy_until, last_arrival, tokens_at;
    double *q_depart; int *q_size; long q_head, q_len, queued_bytes;  /* the bottleneck's queue */
    rule_t rules[MAX_RULES]; int nrules;
    conn_t *conns; int nconns;
} link_t;

static int admit(link_t *l, double now, int size, double *arrival)
{
    if (l->burst_p != 0.0) {
        if (l->bad) l->bad = uniform(&l->rng) >= l->burst_r;
        else l->bad = uniform(&l->rng) < l->burst_p;
    }
    double loss = l->bad ? l->burst_loss : l->loss;
    if (loss != 0.0 && uniform(&l->rng) < loss) return l->bad ? BURST_LOSS : LOSS;
    double depart = now;
    if (l->rate_mbps != 0.0 && l->bucket_bytes) {
        /* a token bucket: a packet leaves once the bucket holds its tokens */
        double backlog = (l->busy_until - now > 0.0 ? l->busy_until - now : 0.0) * (l->rate_mbps * 1e6 / 8);
        if (backlog > 0.0 && backlog + size > l->queue_bytes) return QUEUE;
        double serialise = (double)(size * 8) / (l->rate_mbps * 1e6);
        double full = l->tokens_at - (double)(l->bucket_bytes * 8) / (l->rate_mbps * 1e6);
        double leave = now > full ? now : full;
        l->tokens_at = (l->tokens_at > leave ? l->tokens_at : leave) + serialise;
        depart = leave + serialise;
        l->busy_until = depart;
    } else if (l->rate_mbps != 0.0) {
        while (l->q_len && l->q_depart[l->q_head] <= now) {
            l->queued_bytes -= l->q_size[l->q_head];
            l->q_head = (l->q_head + 1) % SLOTS;
            l->q_len--;
        }
        if (l->queued_bytes + size > l->queue_bytes || l->q_len == SLOTS) return QUEUE;
        depart = (now > l->busy_until ? now : l->busy_until) + (double)(size * 8) / (l->rate_mbps * 1e6);
        l->busy_until = depart;
        long tail = (l->q_head + l->q_len) % SLOTS;
        l->q_depart[tail] = depart;
        l->q_size[tail] = size;
        l->q_len++;
        l->queued_bytes += size;
    }
    double a = depart + l->delay_ms / 1000.0;
    if (l->jitter_ms != 0.0) {
        a = a + uniform(&l->rng) * l->jitter_ms / 1000.0;
        if (a < l->last_arrival) a = l->last_arrival;
        l->last_arrival = a;
    }
    *arrival = a;
    return PASS;
}

static int scripted(link_t *l, const uint8_t *p, int len)
{
    if (!l->nrules || len < 40 || p[0] >> 4 != 4 || p[9] != 6) return 0;
    int ihl = (p[0] & 0x0F) * 4;
    if (len < ihl + 20) return 0;
    const uint8_t *t = p + ihl;
    uint8_t key[12];
    memcpy(key, p + 12, 4);
    memcpy(key + 4, t, 2);
    memcpy(key + 6, p + 16, 4);
    memcpy(key + 10, t + 2, 2);
    uint32_t seq = (uint32_t)t[4] << 24 | t[5] << 16 | t[6] << 8 | t[7];
    conn_t *c = NULL;
    for (int i = 0; i < l->nconns; i++)
        if (!memcmp(l->conns[i].key, key, 12)) { c = &l->conns[i]; break; }
    if (t[13] & 0x02) {  /* SYN: a new connection, or the same one again */
        if (!c) {
            if (l->nconns == MAX_CONNS) return 0;
            c = &l->conns[l->nconns];
            memset(c, 0, sizeof *c);
            memcpy(c->key, key, 12);
            c->isn = seq;
            c->ordinal = l->nconns++;
        } else if (c->isn != seq) {
            c->isn = seq;
            c->ordinal = l->nconns;
        }
        return 0;
    }
    if (!c) return 0;
    uint32_t rel = seq - c->isn;
    int total = p[2] << 8 | p[3];
    int payload = total - ihl - (t[12] >> 4) * 4;
    if (payload <= 0) return 0;
    for (int i = 0; i < l->nrules; i++) {
        rule_t *r = &l->rules[i];
        /* the model's `rel <= target < rel + length`, in unbounded integers */
        if ((r->conn < 0 || r->conn == c->ordinal) && rel <= r->seq
            && (uint64_t)r->seq < (uint64_t)rel + (uint64_t)payload) {
            return c->sent[i]++ < r->times;
        }
    }
    return 0;
}

static void configure(const char *path, link_t links[2])
{
    FILE *f = fopen(path, "r");
    if (!f) { perror(path); exit(2); }
    char dir[8], key[32];
    while (fscanf(f, "%7s %31s", dir, key) == 2) {
        link_t *l = &links[strcmp(dir, "up") ? DOWN : UP];
        if (!strcmp(key, "rule")) {
            rule_t *r = &l->rules[l->nrules];
            long long seq;
            if (l->nrules == MAX_RULES || fscanf(f, "%lld %d %d", &seq, &r->times, &r->conn) != 3) {
                fprintf(stderr, "%s: bad rule\n", path); exit(2);
            }
            r->seq = (uint32_t)seq;
            l->nrules++;
            continue;
        }
        char value[64];
        if (fscanf(f, "%63s", value) != 1) { fprintf(stderr, "%s: no value for %s\n", path, key); exit(2); }
        double v = strtod(value, NULL);
        if (!strcmp(key, "delay_ms")) l->delay_ms = v;
        else if (!strcmp(key, "loss")) l->loss = v;
        else if (!strcmp(key, "jitter_ms")) l->jitter_ms = v;
        else if (!strcmp(key, "burst_p")) l->burst_p = v;
        else if (!strcmp(key, "burst_r")) l->burst_r = v;
        else if (!strcmp(key, "burst_loss")) l->burst_loss = v;
        else if (!strcmp(key, "rate_mbps")) l->rate_mbps = v;
        else if (!strcmp(key, "queue_bytes")) l->queue_bytes = atol(value);
        else if (!strcmp(key, "bucket_bytes")) l->bucket_bytes = atol(value);
        else if (!strcmp(key, "rng_state")) l->rng.state = strtoull(value, NULL, 10);
        else { fprintf(stderr, "%s: unknown key %s\n", path, key); exit(2); }
    }
    fclose(f);
    for (int d = 0; d < 2; d++) {
        links[d].q_depart = malloc(SLOTS * sizeof(double));
        links[d].q_size = malloc(SLOTS * sizeof(int));
        links[d].conns = malloc(MAX_CONNS * sizeof(conn_t));
        if (!links[d].q_depart || !links[d].q_size || !links[d].conns) { perror("malloc"); exit(2); }
    }
}

/* --model: records in, decisions out (both little-endian, packed):
 * in  (double now, uint8 direction, uint16 length, bytes[length])
 * out (uint8 reason, double arrival)  -- arrival 0 when dropped */
static int model(link_t links[2])
{
    uint8_t buf[65536];
    for (;;) {
        double now; uint8_t d; uint16_t len;
        if (fread(&now, 8, 1, stdin) != 1) break;
        if (fread(&d, 1, 1, stdin) != 1 || d > DOWN || fread(&len, 2, 1, stdin) != 1
            || fread(buf, 1, len, stdin) != len) {
            fprintf(stderr, "truncated or bad model input\n");
            return 2;
        }
        double arrival = 0;
        uint8_t reason = scripted(&links[d], buf, len) ? SCRIPTED : admit(&links[d], now, len, &arrival);
        fwrite(&reason, 1, 1, stdout);
        fwrite(&arrival, 8, 1, stdout);
    }
    return 0;
}

/* ---- the forwarder ---- */

typedef struct { int64_t read_ns; double due; int len; uint8_t data[SLOT - 24]; } slot_t;
typedef struct { uint8_t direction, reason; uint16_t len; uint32_t pad; int64_t t_ns; uint8_t head[HEAD]; } drop_rec;
/* a delivery: read, the write begun (sent) and returned (done), how late it was
 * begun, and until when the lane last asked to sleep before it began */
typedef struct { uint8_t direction, pad; uint16_t len; uint32_t pad2; int64_t read_ns, sent_ns, done_ns, late_ns, slept_to_ns; uint8_t head[HEAD]; } delivery_rec;

static volatile int stopping;

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* One direction: its own thread reads from `in`, holds packets in its delay
 * line and writes them to `out` when due. The two directions share nothing,
 * so the kernel's work that each write sets off (the receiving TCP, the
 * reply it sends, the captures' copies) runs on both CPUs. */
typedef struct {
    int d, in, out;
    link_t *link;
    slot_t *slots; long head, len;
    FILE *drops, *deliveries;
    long forwarded, dropped[NREASONS], late_02, late_1;
    size_t logged;  /* bytes in the deliveries log's buffer */
    int64_t slept_to_ns;  /* the deadline of its last sleep */
    double max_late_ms;
} lane_t;

/* a packet just read into `s`: into the delay line (its next slot), or dropped */
static void receive(lane_t *ln, slot_t *s, int line_full)
{
    int reason = scripted(ln->link, s->data, s->len) ? SCRIPTED : admit(ln->link, mono(), s->len, &s->due);
    if (reason == PASS && line_full) reason = FULL;
    if (reason == PASS) {
        ln->len++;
        return;
    }
    drop_rec r = {ln->d, reason, (uint16_t)s->len, 0, s->read_ns, {0}};
    memcpy(r.head, s->data, s->len < HEAD ? s->len : HEAD);
    fwrite(&r, sizeof r, 1, ln->drops);
    ln->dropped[reason]++;
}

static void *run_lane(void *arg)
{
    lane_t *ln = arg;
    struct pollfd pfd = {ln->in, POLLIN, 0};
    static __thread slot_t scratch;
    while (!stopping) {
        int moved = 0;
        for (int i = 0; i < READ_BURST; i++) {  /* read what has come, up to a burst */
            slot_t *s = ln->len < SLOTS ? &ln->slots[(ln->head + ln->len) % SLOTS] : &scratch;
            ssize_t n = read(ln->in, s->data, sizeof s->data);
            if (n <= 0) break;
            s->read_ns = wall_ns();
            s->len = (int)n;
            receive(ln, s, s == &scratch);
            moved = 1;
        }
        double now = mono();
        /* deliver what is due, a few at a time: a write can cost tens of
         * microseconds (it runs the receiving TCP), and what arrives meanwhile
         * must be read, and its time taken, without waiting for a backlog */
        for (int i = 0; i < WRITE_BURST && ln->len && ln->slots[ln->head].due <= now; i++) {
            slot_t *s = &ln->slots[ln->head];
            double late = (now - s->due) * 1000.0;
            int64_t sent_ns = wall_ns();
            if (write(ln->out, s->data, s->len) == s->len) {
                /* the log is flushed here, inside the delivery's own time
                 * (sent to done), never where the lane looks idle */
                if ((ln->logged += sizeof(delivery_rec)) > LOG_BUFFER) {
                    fflush(ln->deliveries);
                    ln->logged = sizeof(delivery_rec);
                }
                int64_t done_ns = wall_ns();
                ln->forwarded++;
                if (late > 0.2) { ln->late_02++; if (late > 1.0) ln->late_1++; }
                if (late > ln->max_late_ms) ln->max_late_ms = late;
                delivery_rec r = {ln->d, 0, (uint16_t)s->len, 0, s->read_ns, sent_ns, done_ns, (int64_t)(late * 1e6), ln->slept_to_ns, {0}};
                memcpy(r.head, s->data, s->len < HEAD ? s->len : HEAD);
                fwrite(&r, sizeof r, 1, ln->deliveries);
            } else {  /* the receiving device refused it: logged as a drop of its own */
                ln->dropped[DEVICE]++;
                drop_rec r = {ln->d, DEVICE, (uint16_t)s->len, 0, sent_ns, {0}};
                memcpy(r.head, s->data, s->len < HEAD ? s->len : HEAD);
                fwrite(&r, sizeof r, 1, ln->drops);
            }
            ln->head = (ln->head + 1) % SLOTS;
            ln->len--;
            moved = 1;
            now = mono();
        }
        if (moved) continue;
        double wait = ln->len ? ln->slots[ln->head].due - now : 0.05;
        if (wait < SPIN_S) continue;  /* spin: a timed sleep can wake too late */
        wait -= SPIN_S;
        if (wait > 0.05) wait = 0.05;  /* and look at `stopping` now and then */
        struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
        ln->slept_to_ns = wall_ns() + (int64_t)(wait * 1e9);
        ppoll(&pfd, 1, &ts, NULL);
    }
    return NULL;
}

static FILE *open_log(const char *base, int d)
{
    char name[4096];
    snprintf(name, sizeof name, "%s.%s", base, dir_name[d]);
    FILE *f = fopen(name, "wb");
    if (!f) { perror(name); exit(2); }
    setvbuf(f, NULL, _IOFBF, LOG_BUFFER);
    return f;
}

int main(int argc, char **argv)
{
    static link_t links[2];
    if (argc == 3 && !strcmp(argv[1], "--model")) {
        configure(argv[2], links);
        return model(links);
    }
    if (argc != 7) {
        fprintf(stderr, "usage: %s FD_CLIENT FD_SERVER CONFIG DROPS DELIVERIES STATS\n"
                        "       %s --model CONFIG < packets > decisions\n", argv[0], argv[0]);
        return 2;
    }
    int fd[2] = {atoi(argv[1]), atoi(argv[2])};  /* read from fd[d], write to fd[!d] */
    configure(argv[3], links);
    static lane_t lanes[2];
    sigset_t term;  /* SIGTERM ends the run: the main thread waits for it, the lanes never see it */
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, NULL);
    signal(SIGINT, SIG_IGN);  /* Ctrl-C is the lab's: it ends us with SIGTERM */
    pthread_t threads[2];
    for (int d = 0; d < 2; d++) {
        lane_t *ln = &lanes[d];
        ln->d = d; ln->in = fd[d]; ln->out = fd[!d]; ln->link = &links[d];
        ln->slots = malloc((size_t)SLOTS * sizeof(slot_t));
        if (!ln->slots) { perror("malloc"); return 2; }
        ln->drops = open_log(argv[4], d);
        ln->deliveries = open_log(argv[5], d);
        if (pthread_create(&threads[d], NULL, run_lane, ln)) { perror("pthread_create"); return 2; }
        /* each lane on a CPU of its own where there are two: lanes of one
         * real-time priority never preempt each other, so on one CPU a read
         * would wait for the other lane's write (which runs a namespace's TCP) */
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        if (cpus >= 2) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(d % cpus, &set);
            pthread_setaffinity_np(threads[d], sizeof set, &set);
        }
    }
    printf("ready\n");
    fflush(stdout);
    int sig;
    sigwait(&term, &sig);
    stopping = 1;
    for (int d = 0; d < 2; d++) {
        pthread_join(threads[d], NULL);
        fclose(lanes[d].drops);
        fclose(lanes[d].deliveries);
    }
    FILE *st = fopen(argv[6], "w");
    if (!st) { perror(argv[6]); return 2; }
    fprintf(st, "{\"forwarded\": {\"up\": %ld, \"down\": %ld}, \"dropped\": {",
            lanes[UP].forwarded, lanes[DOWN].forwarded);
    for (int d = 0; d < 2; d++) {
        fprintf(st, "%s\"%s\": {", d ? ", " : "", dir_name[d]);
        int first = 1;
        for (int r = 1; r < NREASONS; r++)
            if (lanes[d].dropped[r]) {
                fprintf(st, "%s\"%s\": %ld", first ? "" : ", ", reason_name[r], lanes[d].dropped[r]);
                first = 0;
            }
        fprintf(st, "}");
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double max_late = lanes[UP].max_late_ms > lanes[DOWN].max_late_ms ? lanes[UP].max_late_ms : lanes[DOWN].max_late_ms;
    fprintf(st, "}, \"cpu_user_s\": %.3f, \"cpu_system_s\": %.3f",
            ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6);
    fprintf(st, ", \"late_over_0_2ms\": %ld, "
                "\"late_over_1ms\": %ld, \"max_late_ms\": %.6f, \"realtime\": %s}\n",
            lanes[UP].late_02 + lanes[DOWN].late_02,
            lanes[UP].late_1 + lanes[DOWN].late_1, max_late,
            sched_getscheduler(0) == SCHED_FIFO ? "true" : "false");
    fclose(st);
    return 0;
}
