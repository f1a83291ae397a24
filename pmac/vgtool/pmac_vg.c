/* pmac_vg: a small valgrind tool that records a program's machine-independent memory signature.
 *
 * While instrumenting, each superblock is cut into segments (at every side exit and wherever the
 * function changes); a segment's static counts (instructions, loads, stores, bytes, FP
 * instructions by width, flop, def-use distances of FP instructions) are recorded once. At run
 * time inline IR (no helper call) counts the segment's executions and runs a last-outcome
 * predictor for the conditional branch that ends it (miss += last ^ outcome). The counts are
 * folded into the burst they belong to and the segment's function (executions x static counts)
 * by a helper called only when the segment first runs in a new accounting epoch (a burst starts,
 * an MPI call is entered, another thread runs), and for all segments at exit.
 *
 * Bursts: the pmac PMPI shim issues client requests VG_USERREQ_TOOL_BASE('P','M') + 0 (arg1 =
 * seq) at the entry of each MPI call and + 1 at its exit. Code between the exit of call k-1 and
 * the entry of call k is burst seq=k; the first burst (before MPI_Init) is seq 0, the last one
 * after the last call gets last+1. Code inside MPI calls is counted apart (header block).
 *
 * Reuse distance: every load and store is tested inline (in IR, no call) against a SHARDS-style
 * spatial sample: line = addr >> 8 (256-byte blocks, so the sample is consistent for every line
 * size from 32 to 256 bytes), h = top 24 bits of line * 0x9E3779B97F4A7C15; the access is kept
 * when h < threshold (rate R = threshold / 2^24; the threshold is read from a variable that is 0
 * while a thread other than the main one runs, so those accesses are dropped without a call).
 * Kept accesses go to <out>.acc as 8-byte words ((addr >> 5) << 1 | is_store); a word with the
 * top bit set starts burst number (word & ~top), or, with bits 63 and 62 set (OUTSIDE_MARK), the
 * accesses of an MPI call: the MPI library's code and data (its queues, the buffers it copies)
 * push the bursts' lines down the LRU stacks as they push them out of a cache, but count in no
 * burst. Stack distances are computed from that stream by pmac.reuse (numba), scaled by 1/R.
 *
 * Instruction fetch (C_FETCH): each time execution enters another 32-byte chunk of code (an
 * instruction starting in a chunk other than the previous instruction's, the first one of a
 * superblock, or one at or before the previous instruction: a loop that VEX unrolled into the
 * superblock jumps back) counts one fetch; fetches are sampled like data (same hash of the address's
 * 256-byte block) at their own, denser rate R_f = fetch_threshold / 2^24 and written with bit 62
 * set, so pmac.reuse gives the code its own stack distances, scaled by 1/R_f (what an instruction
 * cache of a given size would hold). Whether a chunk is sampled is decided while
 * instrumenting: unsampled code pays nothing at run time.
 *
 * Files (little-endian), written with no address text:
 *   <out>      header 72 B: "PMACVGS1", u32 version=9, u32 n_counters, u32 hash_bits,
 *              u32 threshold, i32 pid, u32 flags, i64 n_bursts, i64 n_functions, i64 n_acc_words,
 *              i64 n_burst_functions, u32 fetch_threshold, u32 0; then the counters of code
 *              outside bursts: inside MPI calls, or run by a thread other than the main one
 *              (n_counters x u64);
 *              n_bursts x (i64 seq, n_counters x u64); n_functions x (char name[64],
 *              char object[64], n_counters x u64); n_burst_functions x (i64 burst, i64 function,
 *              n_counters x u64); trailer "PMACEND1".
 *   <out>.acc  24 B header "PMACVGA4", u32 hash_bits, u32 threshold, u32 fetch_threshold, u32 0; then the sampled words
 *              (bit 0 store, bits 1-43 address / 32, bits 44-61 function id, bit 62 fetch; see
 *              acc_sample) and the markers (bit 63).
 * Counters: see the C_* enum (instructions .. sampled).
 *
 * Def-use distance: for each FP instruction, the distance in instructions to the nearest earlier
 * instruction of the same superblock that wrote one of the vector registers it reads; when none
 * and the superblock jumps back to its own start (a loop), the distance around the loop; else
 * DEP_CAP (independent). Weighted by execution count (sum and count kept per segment).
 *
 * Loop-carried recurrence (C_RECUR): for a superblock that jumps back to its own start, the most
 * FP operations on one register dataflow path from a vector register's value at block entry to
 * the value Put back into the same register (what the next iteration reads: `s += a[i] * b[i]`
 * without reassociation has 1, the add; a triad has 0). Counted once per execution of the block,
 * so a burst's count is the length of the dependent FP chain its loops run through, which no
 * out-of-order core can overlap. C_RECUR_MUL counts the multiplies, fused multiply-adds, divides
 * and square roots on that path (of the longest paths, the one with most of them): their latency
 * differs from an add's by core (Zen 3: add 3, multiply 3, FMA 4 cycles; Golden Cove: add 2-3,
 * multiply and FMA 4), so the convolver prices the two kinds at the profile's two chain probes.
 * Not seen: chains through memory (spilled accumulators) or across several superblocks (a loop
 * body with internal branches that valgrind splits).
 *
 * 4 KiB aliasing (C_ALIAS_LOADS of C_ALIAS_SEEN): a load whose bytes share their low 12 address
 * bits with one of the last ALIAS_RING stores' but lie on another 4 KiB page looks, to a core that
 * checks loads against older stores by those bits (Intel's since Sandy Bridge; AMD's similarly),
 * like a load of the stored data, and waits for the store (two arrays at one 4 KiB phase, a store to
 * b[i] then a load of a[i + 1] ... : stencil2d's u and v, each mmap'ed). No reuse distance sees it.
 * Checking every access would cost a helper call each, so it is sampled in time: every
 * ALIAS_PERIOD words of the reuse sample (acc_sample counts down), the next ALIAS_WINDOW accesses
 * of the main thread each reach alias_access: the window raises g_threshold so that the reuse
 * sample's inline test lets every access through, and acc_access tests the sample's own threshold
 * again (no inline cost at all outside windows). Of a window's loads after its first ALIAS_WARMUP
 * accesses (the ring filled), C_ALIAS_SEEN counts them and C_ALIAS_LOADS those that alias;
 * pmac.memtrace scales that share to all the loads.
 *
 * A forked child (without exec) writes nothing: the files are the parent's.
 * Size: 8 bytes per sampled access, i.e. about 8 * R bytes per access of the program.
 *
 * Options: --pmac-out=<file> (%p expands to the pid), --pmac-sample-threshold=<0..2^24> (data),
 * --pmac-fetch-sample-threshold=<0..2^24> (code).
 */
#include "pub_tool_basics.h"
#include "pub_tool_tooliface.h"
#include "pub_tool_libcassert.h"
#include "pub_tool_libcbase.h"
#include "pub_tool_libcfile.h"
#include "pub_tool_libcprint.h"
#include "pub_tool_libcproc.h"
#include "pub_tool_mallocfree.h"
#include "pub_tool_machine.h"
#include "pub_tool_options.h"
#include "pub_tool_debuginfo.h"
#include "pub_tool_vki.h"
#include "pub_tool_clientstate.h"
#include "libvex_guest_amd64.h"
#include "valgrind.h"

enum {
    C_INSTR, C_LOADS, C_STORES, C_LOAD_BYTES, C_STORE_BYTES, C_FP_SCALAR, C_FP_128, C_FP_256, C_FP_512,
    C_FLOP, C_DIVSQRT, C_BRANCHES, C_BRANCH_MISS, C_DEP_SUM, C_DEP_N, C_RECUR, C_FETCH, C_SAMPLED,
    C_RECUR_MUL, C_ALIAS_LOADS, C_ALIAS_SEEN, NC
};
#define HASH_BITS 24
#define DEP_CAP 32
#define NAME_LEN 64
#define ACC_BUF (1 << 16)
#define MAX_INSNS 512

typedef struct { ULong v[NC]; } Counters;

typedef struct Fn {
    struct Fn *next;
    HChar name[NAME_LEN];
    HChar obj[NAME_LEN];
    Counters c;
    Long id;        /* creation order = order in the output file = the id in access words */
} Fn;

/* The function whose counters ``c`` are (segments and the instrumentation hold the counters). */
static const Fn *fn_of(const Counters *c) {
    return (const Fn *)((const HChar *)c - __builtin_offsetof(Fn, c));
}

/* A segment's run-time fields come first: the instrumentation updates them inline (IR loads
 * and stores at fixed addresses, no helper call); seg_sync folds them into the counters of the
 * burst they belong to when the accounting epoch changes (burst cut, MPI call, thread switch). */
typedef struct Seg {
    ULong n;        /* executions since the last sync */
    ULong miss;     /* of which the branch ending the segment was mispredicted */
    ULong last;     /* last outcome of that branch (0/1) */
    ULong epoch;    /* accounting epoch of n and miss */
    ULong v[NC];    /* static counts per execution; v[C_BRANCHES] = 1 when it ends at a branch */
    Counters *fn;
    struct Seg *next;   /* all segments, for the final sync */
} Seg;

typedef struct { Long seq; Counters c; } Burst;

static const HChar *clo_out = "pmac-vg.%p";
static ULong clo_threshold = 1u << 20; /* R = 1/16 */
static ULong clo_fetch_threshold = 1u << 21; /* R = 1/8 for code (see sample_fetch) */

static Counters mpi_c;
static Counters *cur;
static Burst *bursts;
static Long n_bursts, cap_bursts;
static Int mpi_depth;
static UInt in_mpi;
static Fn *fn_tab[4096];
static Fn **fn_list;
static Long n_fns, cap_fns;
static ULong acc_buf[ACC_BUF];
static Int acc_n;
static Long acc_total;
static Int acc_fd = -1;
static HChar *out_path;
static UInt flags;
static Bool is_fork_child;  /* a forked child writes nothing: the files belong to the parent */
/* Threads other than the main one (MPI progress threads, BLAS or OpenMP workers) belong to no
 * burst: their counts go to the "outside bursts" counters (those of code inside MPI calls) and
 * their accesses are not sampled. valgrind runs one thread at a time and says when it switches. */
static Bool other_thread;
/* Accounting epochs: a new one starts whenever the counters that code runs for change (a burst
 * starts, an MPI call is entered, another thread runs); epoch_burst[e] is the burst index of
 * epoch e, or -1 for the outside-bursts counters. */
static ULong g_epoch;
static Long *epoch_burst;
static ULong cap_epochs;
static Seg *all_segs;
/* the hash threshold the inline sampling test compares with: 0 (nothing sampled) while code
 * runs outside bursts */
static ULong g_threshold;
static ULong g_fetch_threshold;   /* the same for instruction fetches */

/* 4 KiB aliasing, sampled in time (see the header comment) */
#define ALIAS_RING 8
#define ALIAS_PERIOD 4096
#define ALIAS_WINDOW 512
#define ALIAS_WARMUP 32
static ULong g_alias_on;            /* nonzero while a window runs (g_threshold then lets all through) */
static ULong g_alias_countdown = ALIAS_PERIOD;   /* sampled words (acc_sample) until the next window */
static Addr alias_addr[ALIAS_RING];
static UWord alias_size[ALIAS_RING];
static UInt alias_n;                /* stores seen in this window */
static UInt alias_left;             /* accesses left in this window */

/* ---- run-time helpers ------------------------------------------------------------------ */

static void acc_flush(void) {
    if (acc_n && acc_fd >= 0) VG_(write)(acc_fd, acc_buf, acc_n * sizeof(ULong));
    acc_n = 0;
}

static inline void acc_push(ULong w) {
    if (acc_fd < 0) return;
    if (acc_n == ACC_BUF) acc_flush();
    acc_buf[acc_n++] = w;
    acc_total++;
}

/* Counters per (burst, function): the functions a burst runs one after another each get their
 * own overlap of memory and compute in the convolver (pmac.phases). Entries in creation order;
 * an open-addressing table on (burst, function id) holds entry index + 1 (0: free slot). */
typedef struct { Long burst, fn; Counters c; } BurstFn;
static BurstFn *bf;
static Long n_bf, cap_bf;
static Long *bf_slot;
static ULong bf_mask;

static ULong bf_hash(Long bi, Long fn) {
    ULong h = (ULong)bi * 0x9E3779B97F4A7C15ULL ^ (ULong)fn * 0xC2B2AE3D27D4EB4FULL;
    return h ^ (h >> 29);
}

static Counters *bf_counters(Long bi, Long fn) {
    if (2 * (ULong)(n_bf + 1) > bf_mask + 1) {   /* keep the table at most half full */
        ULong size = bf_slot ? 2 * (bf_mask + 1) : 4096;
        Long *slot = VG_(calloc)("pmac.bfslot", size, sizeof(Long));
        for (Long k = 0; k < n_bf; k++) {
            ULong i = bf_hash(bf[k].burst, bf[k].fn) & (size - 1);
            while (slot[i]) i = (i + 1) & (size - 1);
            slot[i] = k + 1;
        }
        if (bf_slot) VG_(free)(bf_slot);
        bf_slot = slot;
        bf_mask = size - 1;
    }
    ULong i = bf_hash(bi, fn) & bf_mask;
    for (; bf_slot[i]; i = (i + 1) & bf_mask) {
        BurstFn *e = &bf[bf_slot[i] - 1];
        if (e->burst == bi && e->fn == fn) return &e->c;
    }
    if (n_bf == cap_bf) {
        cap_bf = cap_bf ? 2 * cap_bf : 4096;
        bf = VG_(realloc)("pmac.bf", bf, cap_bf * sizeof(BurstFn));
    }
    VG_(memset)(&bf[n_bf], 0, sizeof(BurstFn));
    bf[n_bf].burst = bi;
    bf[n_bf].fn = fn;
    bf_slot[i] = ++n_bf;
    return &bf[n_bf - 1].c;
}

static void seg_add(ULong *dst, const Seg *s, ULong n) {
    const ULong *v = s->v;
    for (Int k = 0; k <= C_BRANCHES; k++) dst[k] += n * v[k];
    dst[C_DEP_SUM] += n * v[C_DEP_SUM];
    dst[C_DEP_N] += n * v[C_DEP_N];
    dst[C_RECUR] += n * v[C_RECUR];
    dst[C_RECUR_MUL] += n * v[C_RECUR_MUL];
    dst[C_FETCH] += n * v[C_FETCH];
    dst[C_BRANCH_MISS] += s->miss;
}

/* Add a segment's executions since its last sync to the counters of its epoch (a burst, or
 * code outside bursts), of its function, and of the pair (burst, function). */
static void seg_fold(Seg *s) {
    ULong n = s->n;
    if (n) {
        Long bi = epoch_burst[s->epoch];
        seg_add(bi < 0 ? mpi_c.v : bursts[bi].c.v, s, n);
        seg_add(s->fn->v, s, n);
        if (bi >= 0) seg_add(bf_counters(bi, fn_of(s->fn)->id)->v, s, n);
    }
    s->n = s->miss = 0;
}

/* Called (guarded, inline test) when a segment runs for the first time in a new epoch. */
static VG_REGPARM(1) void seg_sync(Seg *s) {
    seg_fold(s);
    s->epoch = g_epoch;
}

/* Start a new accounting epoch when the counters that code runs for change. The main thread's
 * accesses inside MPI calls are sampled too (they push the bursts' lines down the LRU stacks),
 * other threads' are not. */
static void set_target(void) {
    Long bi = (in_mpi || other_thread) ? -1 : n_bursts - 1;
    if (other_thread) g_alias_on = 0;
    g_threshold = other_thread ? 0 : g_alias_on ? 1ULL << HASH_BITS : clo_threshold;
    g_fetch_threshold = other_thread ? 0 : clo_fetch_threshold;
    if (g_epoch && epoch_burst[g_epoch] == bi) return;
    if (++g_epoch >= cap_epochs) {
        cap_epochs = cap_epochs ? 2 * cap_epochs : 4096;
        epoch_burst = VG_(realloc)("pmac.epochs", epoch_burst, cap_epochs * sizeof(Long));
    }
    epoch_burst[g_epoch] = bi;
}

/* An access word: bit 0 store, bits 1-43 the address in 32-byte units (user addresses < 2^48),
 * bits 44-61 the function's id (ids beyond FN_ID_MAX share it), bit 62 an instruction fetch;
 * bit 63 marks a burst start. ``tag``: bit 0 store, bit 1 fetch, the function's id above. */
#define FN_SHIFT 44
#define FN_ID_MAX ((1ULL << 18) - 1)
#define FETCH_BIT 62
/* starts the accesses made inside an MPI call: they update the LRU stacks and count in no burst
 * (until the next burst marker) */
#define OUTSIDE_MARK ((1ULL << 63) | (1ULL << 62))

/* Inside an MPI call the library polls the same few lines while it waits: a line already written
 * in this call (a direct-mapped filter on the 32-byte unit, tagged with the call's number) is
 * not written again, so a long wait costs its distinct lines, not its iterations. What the
 * stacks lose is the order of the call's own repeated lines, which all stay above the bursts'. */
#define OUT_FILTER 4096
static ULong out_filter[OUT_FILTER];
static ULong out_section;   /* number of the current MPI call (from 1), part of the filter's tag */

static void alias_start(void);

static VG_REGPARM(2) void acc_sample(Addr a, UWord tag) {
    ULong w = (((ULong)(a >> 5) << 1) & ((1ULL << FN_SHIFT) - 1)) | (tag & 1)
              | ((ULong)((tag >> 1) & 1) << FETCH_BIT) | ((ULong)(tag >> 2) << FN_SHIFT);
    if (in_mpi) {
        ULong key = ((ULong)(a >> 5) << 1 | ((tag >> 1) & 1)) ^ (out_section << 45);
        ULong *slot = &out_filter[((a >> 5) ^ (a >> 17)) & (OUT_FILTER - 1)];
        if (*slot == key) return;
        *slot = key;
    }
    cur->v[C_SAMPLED]++;
    acc_push(w);
    if (--g_alias_countdown == 0) alias_start();
}

/* Open a window (acc_sample's countdown reached 0), unless a thread other than the main one runs
 * (its accesses count in no burst and are not sampled). */
static void alias_start(void) {
    g_alias_countdown = ALIAS_PERIOD;
    if (other_thread) return;
    g_alias_on = 1;
    g_threshold = 1ULL << HASH_BITS;
    alias_left = ALIAS_WINDOW;
    alias_n = 0;
}

/* One access of a window: a store enters the ring, a load is tested against it. ``info``: bit 0
 * store, the size in bytes above. */
static VG_REGPARM(3) void alias_access(Addr a, UWord info, Counters *fn) {
    UWord size = info >> 1;
    if (info & 1) {
        alias_addr[alias_n % ALIAS_RING] = a;
        alias_size[alias_n % ALIAS_RING] = size;
        alias_n++;
    } else if (ALIAS_WINDOW - alias_left >= ALIAS_WARMUP) {
        ULong hit = 0;
        UInt n = alias_n < ALIAS_RING ? alias_n : ALIAS_RING;
        for (UInt k = 0; k < n; k++) {
            Addr s = alias_addr[k];
            if ((s >> 12) == (a >> 12)) continue;        /* same page: a true dependence or none */
            UWord lo = a & 0xFFF, slo = s & 0xFFF;
            if (lo < slo + alias_size[k] && slo < lo + size) { hit = 1; break; }
        }
        cur->v[C_ALIAS_SEEN]++;
        cur->v[C_ALIAS_LOADS] += hit;
        fn->v[C_ALIAS_SEEN]++;
        fn->v[C_ALIAS_LOADS] += hit;
        if (!in_mpi) {
            Counters *c = bf_counters(n_bursts - 1, fn_of(fn)->id);
            c->v[C_ALIAS_SEEN]++;
            c->v[C_ALIAS_LOADS] += hit;
        }
    }
    if (--alias_left == 0) {
        g_alias_on = 0;
        g_threshold = other_thread ? 0 : clo_threshold;
    }
}

static ULong hash_top(ULong a);

/* The call of a load or store (sample_access): ``tag`` as acc_sample's, the access's size in bytes
 * from bit 32. */
static VG_REGPARM(3) void acc_access(Addr a, UWord tag, Counters *fn) {
    if (hash_top(a) < clo_threshold) acc_sample(a, tag & 0xFFFFFFFFULL);
    if (g_alias_on) alias_access(a, (tag & 1) | ((tag >> 32) << 1), fn);
}

static void new_burst(Long seq) {
    if (n_bursts == cap_bursts) {
        cap_bursts = cap_bursts ? 2 * cap_bursts : 1024;
        bursts = VG_(realloc)("pmac.bursts", bursts, cap_bursts * sizeof(Burst));
    }
    VG_(memset)(&bursts[n_bursts], 0, sizeof(Burst));
    bursts[n_bursts].seq = seq;
    cur = &bursts[n_bursts].c;
    acc_push((1ULL << 63) | (ULong)n_bursts);
    n_bursts++;
    set_target();
}

static Bool pm_client_request(ThreadId tid, UWord *arg, UWord *ret) {
    if (!VG_IS_TOOL_USERREQ('P', 'M', arg[0])) return False;
    UWord req = arg[0] - VG_USERREQ_TOOL_BASE('P', 'M');
    if (req == 0) {           /* entry of MPI call arg[1] */
        if (mpi_depth++ == 0) {
            bursts[n_bursts - 1].seq = (Long)arg[1];
            cur = &mpi_c;
            in_mpi = 1;
            out_section++;
            acc_push(OUTSIDE_MARK);
            set_target();
        }
    } else if (req == 1) {    /* exit of MPI call arg[1] */
        if (mpi_depth > 0 && --mpi_depth == 0) {
            in_mpi = 0;
            new_burst((Long)arg[1] + 1);
        }
    } else {
        return False;
    }
    *ret = 0;
    return True;
}

/* ---- functions ----------------------------------------------------------------------- */

static Counters *fn_counters(Addr a) {
    const HChar *name = NULL, *obj = NULL;
    DiEpoch ep = VG_(current_DiEpoch)();
    HChar nbuf[NAME_LEN], obuf[NAME_LEN];
    Bool has_obj = VG_(get_objname)(ep, a, &obj) && obj && *obj;
    if (!VG_(get_fnname)(ep, a, &name) || !name || !*name) {
        /* no symbol: code of a known object is named by its 4 KiB page; code outside any
           object (JIT code, e.g. numba) by its 64-byte block, which pmac.memtrace maps to
           the jitted functions' entry points */
        VG_(snprintf)(nbuf, sizeof nbuf, "?0x%lx", (unsigned long)(a & ~(Addr)(has_obj ? 0xfff : 0x3f)));
        name = nbuf;
    }
    if (has_obj) {
        const HChar *base = VG_(strrchr)(obj, '/');
        obj = base ? base + 1 : obj;
    } else {
        obj = "";
    }
    VG_(strncpy)(obuf, obj, NAME_LEN - 1);
    obuf[NAME_LEN - 1] = 0;
    UInt h = 5381;
    for (const HChar *p = name; *p && p - name < NAME_LEN - 1; p++) h = h * 33 + (UChar)*p;
    for (const HChar *p = obuf; *p; p++) h = h * 33 + (UChar)*p;
    h &= 4095;
    for (Fn *f = fn_tab[h]; f; f = f->next)
        if (VG_(strncmp)(f->name, name, NAME_LEN - 1) == 0 && VG_(strcmp)(f->obj, obuf) == 0) return &f->c;
    Fn *f = VG_(calloc)("pmac.fn", 1, sizeof(Fn));
    VG_(strncpy)(f->name, name, NAME_LEN - 1);
    VG_(strcpy)(f->obj, obuf);
    f->next = fn_tab[h];
    fn_tab[h] = f;
    if (n_fns == cap_fns) {
        cap_fns = cap_fns ? 2 * cap_fns : 1024;
        fn_list = VG_(realloc)("pmac.fnlist", fn_list, cap_fns * sizeof(Fn *));
    }
    f->id = n_fns;
    fn_list[n_fns++] = f;
    return &f->c;
}

/* ---- instrumentation ----------------------------------------------------------------- */

typedef struct { Int lanes, bits, flop_per_lane, fma, divsqrt; } FpOp;

static Bool is_divsqrt(IROp op) {
    switch (op) {
    case Iop_DivF64: case Iop_SqrtF64: case Iop_DivF64r32: case Iop_Div64F0x2: case Iop_Sqrt64F0x2:
    case Iop_DivF32: case Iop_SqrtF32: case Iop_Div32F0x4: case Iop_Sqrt32F0x4:
    case Iop_Div64Fx2: case Iop_Sqrt64Fx2: case Iop_Div32Fx4: case Iop_Sqrt32Fx4:
    case Iop_Div64Fx4: case Iop_Sqrt64Fx4: case Iop_Div32Fx8: case Iop_Sqrt32Fx8:
        return True;
    default:
        return False;
    }
}

static Bool fp_op(IROp op, FpOp *o) {
    o->fma = 0;
    o->flop_per_lane = 1;
    o->divsqrt = is_divsqrt(op);
    switch (op) {
    case Iop_AddF64: case Iop_SubF64: case Iop_MulF64: case Iop_DivF64: case Iop_SqrtF64:
    case Iop_AddF64r32: case Iop_SubF64r32: case Iop_MulF64r32: case Iop_DivF64r32:
    case Iop_Add64F0x2: case Iop_Sub64F0x2: case Iop_Mul64F0x2: case Iop_Div64F0x2: case Iop_Sqrt64F0x2:
        o->lanes = 1; o->bits = 64; return True;
    case Iop_AddF32: case Iop_SubF32: case Iop_MulF32: case Iop_DivF32: case Iop_SqrtF32:
    case Iop_Add32F0x4: case Iop_Sub32F0x4: case Iop_Mul32F0x4: case Iop_Div32F0x4: case Iop_Sqrt32F0x4:
        o->lanes = 1; o->bits = 32; return True;
    case Iop_MAddF64: case Iop_MSubF64: case Iop_MAddF64r32: case Iop_MSubF64r32:
        o->lanes = 1; o->bits = 64; o->flop_per_lane = 2; o->fma = 1; return True;
    case Iop_MAddF32: case Iop_MSubF32:
        o->lanes = 1; o->bits = 32; o->flop_per_lane = 2; o->fma = 1; return True;
    case Iop_Add64Fx2: case Iop_Sub64Fx2: case Iop_Mul64Fx2: case Iop_Div64Fx2: case Iop_Sqrt64Fx2:
        o->lanes = 2; o->bits = 64; return True;
    case Iop_Add32Fx4: case Iop_Sub32Fx4: case Iop_Mul32Fx4: case Iop_Div32Fx4: case Iop_Sqrt32Fx4:
        o->lanes = 4; o->bits = 32; return True;
    case Iop_Add64Fx4: case Iop_Sub64Fx4: case Iop_Mul64Fx4: case Iop_Div64Fx4: case Iop_Sqrt64Fx4:
        o->lanes = 4; o->bits = 64; return True;
    case Iop_Add32Fx8: case Iop_Sub32Fx8: case Iop_Mul32Fx8: case Iop_Div32Fx8: case Iop_Sqrt32Fx8:
        o->lanes = 8; o->bits = 32; return True;
    default:
        return False;
    }
}

typedef struct {
    Int flop;        /* floating-point operations of the instruction */
    Int divsqrt;     /* of which divides and square roots (lanes) */
    Int width;       /* 0 none, 1 scalar, 2 128-bit, 3 256-bit, 4 512-bit */
    Int dep;         /* def-use distance (FP instructions) */
} InsnInfo;

#define YMM_LO ((Int)__builtin_offsetof(VexGuestAMD64State, guest_YMM0))
#define YMM_HI ((Int)__builtin_offsetof(VexGuestAMD64State, guest_YMM16))
#define ORIGIN_NONE (-1)   /* memory, constant: no register producer */
#define MAX_ARGS 4

static Int ymm_reg(Int off) { return (off >= YMM_LO && off < YMM_HI) ? (off - YMM_LO) / 32 : -1; }

static IROp expr_op(IRExpr *e, IRExpr **args, Int *n) {
    *n = 0;
    switch (e->tag) {
    case Iex_Unop: args[(*n)++] = e->Iex.Unop.arg; return e->Iex.Unop.op;
    case Iex_Binop: args[(*n)++] = e->Iex.Binop.arg1; args[(*n)++] = e->Iex.Binop.arg2; return e->Iex.Binop.op;
    case Iex_Triop: args[(*n)++] = e->Iex.Triop.details->arg1; args[(*n)++] = e->Iex.Triop.details->arg2;
        args[(*n)++] = e->Iex.Triop.details->arg3; return e->Iex.Triop.details->op;
    case Iex_Qop: args[(*n)++] = e->Iex.Qop.details->arg1; args[(*n)++] = e->Iex.Qop.details->arg2;
        args[(*n)++] = e->Iex.Qop.details->arg3; args[(*n)++] = e->Iex.Qop.details->arg4; return e->Iex.Qop.details->op;
    case Iex_ITE: args[(*n)++] = e->Iex.ITE.cond; args[(*n)++] = e->Iex.ITE.iftrue; args[(*n)++] = e->Iex.ITE.iffalse;
        return Iop_INVALID;
    default: return Iop_INVALID;
    }
}

typedef struct {
    Int n_insn;
    Bool loop;
    Int *origin;       /* per temp: producing instruction, ORIGIN_NONE, or -(reg+2) for a vector Get */
    Int (*args)[MAX_ARGS];
    Int put_origin[16]; /* producer of the last value Put to each vector register, -1 none */
} Flow;

/* distance from instruction k back to the nearest producer of temp t (DEP_CAP when none) */
static Int resolve(Flow *fl, Int t, Int k, Int depth) {
    Int o = fl->origin[t];
    if (o >= 0 && o < k) return k - o;
    Int best = DEP_CAP;
    if (o == k && depth < 8) {
        for (Int a = 0; a < MAX_ARGS; a++) {
            if (fl->args[t][a] < 0) continue;
            Int d = resolve(fl, fl->args[t][a], k, depth + 1);
            if (d < best) best = d;
        }
    } else if (o <= -2 && fl->loop) {
        Int j = fl->put_origin[-o - 2];
        if (j >= 0) {
            Int d = fl->n_insn - j + k;
            if (d < best) best = d;
        }
    }
    return best;
}

#define NREG 16
#define NO_PATH (-(1 << 28))

/* A path's length packed with its multiply-class operations: REC_PACK * ops + mul_ops, so that
 * the longest path wins and, among those, the one with most multiply-class operations. */
#define REC_PACK 4096

static Bool mul_class(IROp op, const FpOp *o) {
    if (o->fma || o->divsqrt) return True;
    switch (op) {
    case Iop_MulF64: case Iop_MulF64r32: case Iop_Mul64F0x2: case Iop_MulF32: case Iop_Mul32F0x4:
    case Iop_Mul64Fx2: case Iop_Mul32Fx4: case Iop_Mul64Fx4: case Iop_Mul32Fx8:
        return True;
    default:
        return False;
    }
}

/* The loop-carried FP recurrence of a block (see C_RECUR above): dp[t][r] is the longest path,
 * packed (REC_PACK), from register r's value at block entry to temp t (NO_PATH: none). Returns
 * the packed length of the longest carried path. */
static Int recurrence(IRSB *sb) {
    Int nt = sb->tyenv->types_used;
    Int (*dp)[NREG] = VG_(malloc)("pmac.rec", (nt + 1) * sizeof *dp);
    Int cur[NREG][NREG];
    for (Int r = 0; r < NREG; r++)
        for (Int q = 0; q < NREG; q++) cur[r][q] = r == q ? 0 : NO_PATH;
    for (Int t = 0; t < nt; t++)
        for (Int q = 0; q < NREG; q++) dp[t][q] = NO_PATH;
    for (Int s = 0; s < sb->stmts_used; s++) {
        IRStmt *st = sb->stmts[s];
        if (st->tag == Ist_WrTmp) {
            IRTemp t = st->Ist.WrTmp.tmp;
            IRExpr *e = st->Ist.WrTmp.data;
            if (e->tag == Iex_Get) {
                Int r = ymm_reg(e->Iex.Get.offset);
                if (r >= 0) for (Int q = 0; q < NREG; q++) dp[t][q] = cur[r][q];
            } else if (e->tag == Iex_RdTmp) {
                for (Int q = 0; q < NREG; q++) dp[t][q] = dp[e->Iex.RdTmp.tmp][q];
            } else if (e->tag != Iex_Load && e->tag != Iex_Const) {
                IRExpr *args[MAX_ARGS];
                Int na;
                IROp op = expr_op(e, args, &na);
                FpOp o;
                Int fp = op != Iop_INVALID && fp_op(op, &o);
                for (Int q = 0; q < NREG; q++) {
                    Int m = NO_PATH;
                    for (Int a = 0; a < na; a++)
                        if (args[a]->tag == Iex_RdTmp && dp[args[a]->Iex.RdTmp.tmp][q] > m) m = dp[args[a]->Iex.RdTmp.tmp][q];
                    dp[t][q] = (m > NO_PATH && fp) ? m + REC_PACK + (mul_class(op, &o) ? 1 : 0) : m;
                }
            }
        } else if (st->tag == Ist_Put) {
            Int off = st->Ist.Put.offset, r = ymm_reg(off);
            /* a write of the register's low lanes replaces the value; the upper lanes (zeroed
             * by VEX after a scalar or 128-bit operation) are not the carried value */
            if (r >= 0 && (off - YMM_LO) % 32 == 0) {
                IRExpr *d = st->Ist.Put.data;
                for (Int q = 0; q < NREG; q++) cur[r][q] = d->tag == Iex_RdTmp ? dp[d->Iex.RdTmp.tmp][q] : NO_PATH;
            }
        }
    }
    Int rec = 0;
    for (Int r = 0; r < NREG; r++) if (cur[r][r] > rec) rec = cur[r][r];
    VG_(free)(dp);
    return rec;
}

static Int analyse(IRSB *sb, InsnInfo *info, Int n_insn) {
    Int nt = sb->tyenv->types_used;
    Flow fl;
    fl.n_insn = n_insn;
    fl.loop = False;
    fl.origin = VG_(malloc)("pmac.flow", (nt + 1) * sizeof(Int));
    fl.args = VG_(malloc)("pmac.flow", (nt + 1) * sizeof(Int[MAX_ARGS]));
    for (Int t = 0; t < nt; t++) { fl.origin[t] = ORIGIN_NONE; for (Int a = 0; a < MAX_ARGS; a++) fl.args[t][a] = -1; }
    for (Int r = 0; r < 16; r++) fl.put_origin[r] = -1;
    Int *fp_tmp = VG_(malloc)("pmac.flow", (nt + 1) * sizeof(Int));
    Int *fp_insn = VG_(malloc)("pmac.flow", (nt + 1) * sizeof(Int));
    Int n_fp = 0;

    /* pass 1: temps' producers, FP ops per instruction, vector registers written */
    Int i = -1, vbits = 0, fmabits = 0, any = 0;
    for (Int s = 0; s < sb->stmts_used; s++) {
        IRStmt *st = sb->stmts[s];
        if (st->tag == Ist_IMark) {
            if (i >= 0 && any) {
                Int b = vbits > fmabits ? vbits : fmabits;
                info[i].width = b <= 64 ? 1 : b <= 128 ? 2 : b <= 256 ? 3 : 4;
            }
            if (i + 1 >= n_insn) break;
            i++;
            vbits = fmabits = any = 0;
            continue;
        }
        if (i < 0) continue;
        if (st->tag == Ist_WrTmp) {
            IRTemp t = st->Ist.WrTmp.tmp;
            IRExpr *e = st->Ist.WrTmp.data;
            if (e->tag == Iex_Get) {
                Int r = ymm_reg(e->Iex.Get.offset);
                /* written earlier in this block: its producer; else the value at block entry */
                fl.origin[t] = r < 0 ? ORIGIN_NONE : fl.put_origin[r] >= 0 ? fl.put_origin[r] : -(r + 2);
            } else if (e->tag == Iex_RdTmp) {
                fl.origin[t] = fl.origin[e->Iex.RdTmp.tmp];
                for (Int a = 0; a < MAX_ARGS; a++) fl.args[t][a] = fl.args[e->Iex.RdTmp.tmp][a];
            } else if (e->tag == Iex_Load || e->tag == Iex_Const) {
                fl.origin[t] = ORIGIN_NONE;
            } else {
                IRExpr *args[MAX_ARGS];
                Int na;
                IROp op = expr_op(e, args, &na);
                fl.origin[t] = i;
                for (Int a = 0; a < na; a++) if (args[a]->tag == Iex_RdTmp) fl.args[t][a] = args[a]->Iex.RdTmp.tmp;
                FpOp o;
                if (op != Iop_INVALID && fp_op(op, &o)) {
                    any = 1;
                    info[i].flop += o.lanes * o.flop_per_lane;
                    if (o.divsqrt) info[i].divsqrt += o.lanes;
                    if (o.fma) fmabits += o.bits; else if (o.lanes * o.bits > vbits) vbits = o.lanes * o.bits;
                    fp_tmp[n_fp] = t;
                    fp_insn[n_fp++] = i;
                }
            }
        } else if (st->tag == Ist_Put) {
            Int r = ymm_reg(st->Ist.Put.offset);
            if (r >= 0) {
                IRExpr *d = st->Ist.Put.data;
                Int o = (d->tag == Iex_RdTmp) ? fl.origin[d->Iex.RdTmp.tmp] : ORIGIN_NONE;
                fl.put_origin[r] = o >= 0 ? o : i;
            }
        }
    }
    if (i >= 0 && any) {
        Int b = vbits > fmabits ? vbits : fmabits;
        info[i].width = b <= 64 ? 1 : b <= 128 ? 2 : b <= 256 ? 3 : 4;
    }
    /* does the block loop back to its own start? */
    Addr start = 0;
    for (Int s = 0; s < sb->stmts_used; s++)
        if (sb->stmts[s]->tag == Ist_IMark) { start = sb->stmts[s]->Ist.IMark.addr; break; }
    for (Int s = 0; s < sb->stmts_used; s++) {
        IRStmt *st = sb->stmts[s];
        if (st->tag == Ist_Exit && st->Ist.Exit.dst->tag == Ico_U64 && st->Ist.Exit.dst->Ico.U64 == start) fl.loop = True;
    }
    if (sb->next->tag == Iex_Const && sb->next->Iex.Const.con->tag == Ico_U64 &&
        sb->next->Iex.Const.con->Ico.U64 == start) fl.loop = True;
    /* pass 2: per FP instruction, the nearest producer of any operand of its FP operations */
    for (Int k = 0; k < n_insn; k++) info[k].dep = DEP_CAP;
    for (Int f = 0; f < n_fp; f++) {
        Int k = fp_insn[f], t = fp_tmp[f];
        for (Int a = 0; a < MAX_ARGS; a++) {
            if (fl.args[t][a] < 0) continue;
            Int d = resolve(&fl, fl.args[t][a], k, 0);
            if (d < info[k].dep) info[k].dep = d;
        }
    }
    VG_(free)(fl.origin);
    VG_(free)(fl.args);
    VG_(free)(fp_tmp);
    VG_(free)(fp_insn);
    return fl.loop ? recurrence(sb) : 0;
}

static IRExpr *mk_u64(ULong x) { return IRExpr_Const(IRConst_U64(x)); }

static IRExpr *mk_load(IRSB *out, ULong addr) {
    IRTemp t = newIRTemp(out->tyenv, Ity_I64);
    addStmtToIRSB(out, IRStmt_WrTmp(t, IRExpr_Load(Iend_LE, Ity_I64, mk_u64(addr))));
    return IRExpr_RdTmp(t);
}

static IRExpr *mk_binop(IRSB *out, IROp op, IRExpr *a, IRExpr *b) {
    IRTemp t = newIRTemp(out->tyenv, op == Iop_CmpNE64 || op == Iop_CmpLT64U ? Ity_I1 : Ity_I64);
    addStmtToIRSB(out, IRStmt_WrTmp(t, IRExpr_Binop(op, a, b)));
    return IRExpr_RdTmp(t);
}

/* End the current segment: count one execution of it, inline (and the outcome of the branch
 * that ends it, if any: a 0/1 I64 expression). An empty segment (after the block's last side
 * exit) costs nothing. */
static void flush_seg(IRSB *out, Seg **segp, IRExpr *outcome) {
    Seg *s = *segp;
    if (!s) return;
    *segp = NULL;
    Bool empty = !outcome;
    for (Int k = 0; k < NC && empty; k++) empty = s->v[k] == 0;
    if (empty) { VG_(free)(s); return; }
    s->next = all_segs;
    all_segs = s;
    ULong a = (ULong)(Addr)s;
    /* if (s->epoch != g_epoch) seg_sync(s) */
    IRExpr *stale = mk_binop(out, Iop_CmpNE64, mk_load(out, a + __builtin_offsetof(Seg, epoch)),
                             mk_load(out, (ULong)(Addr)&g_epoch));
    IRDirty *d = unsafeIRDirty_0_N(1, "seg_sync", VG_(fnptr_to_fnentry)(&seg_sync), mkIRExprVec_1(mk_u64(a)));
    /* No memory effects declared: the helper only touches the tool's own Seg, whose fields the
     * IR below loads after the call (VEX's tree builder moves a load later, never earlier).
     * Declaring them (Ifx_Modify) made nbody 25 % slower than one helper call per segment;
     * without, 20 % faster (CPU time, interleaved runs). */
    d->guard = stale;
    addStmtToIRSB(out, IRStmt_Dirty(d));
    /* s->n++ */
    IRExpr *n = mk_binop(out, Iop_Add64, mk_load(out, a + __builtin_offsetof(Seg, n)), mk_u64(1));
    addStmtToIRSB(out, IRStmt_Store(Iend_LE, mk_u64(a + __builtin_offsetof(Seg, n)), n));
    if (outcome) {
        /* s->miss += s->last ^ outcome; s->last = outcome */
        s->v[C_BRANCHES] = 1;
        IRExpr *x = mk_binop(out, Iop_Xor64, mk_load(out, a + __builtin_offsetof(Seg, last)), outcome);
        IRExpr *m = mk_binop(out, Iop_Add64, mk_load(out, a + __builtin_offsetof(Seg, miss)), x);
        addStmtToIRSB(out, IRStmt_Store(Iend_LE, mk_u64(a + __builtin_offsetof(Seg, miss)), m));
        addStmtToIRSB(out, IRStmt_Store(Iend_LE, mk_u64(a + __builtin_offsetof(Seg, last)), outcome));
    }
}

static Seg *new_seg(Counters *fn) {
    Seg *s = VG_(calloc)("pmac.seg", 1, sizeof(Seg));
    s->fn = fn;
    return s;
}

static ULong fn_tag(Counters *fn) {
    const Fn *owner = fn_of(fn);
    return ((ULong)owner->id < FN_ID_MAX ? (ULong)owner->id : FN_ID_MAX) << 2;
}

/* The static part of the sample test: the top HASH_BITS of the 256-byte block's hash. */
static ULong hash_top(ULong a) { return ((a >> 8) * 0x9E3779B97F4A7C15ULL) >> (64 - HASH_BITS); }

/* An instruction fetch of the 32-byte chunk holding ``a``: whether the chunk is sampled is known
 * while instrumenting (its address is a constant), so an unsampled one costs nothing at run time
 * and a sampled one a guarded call that tests only the run-time threshold (0 while another thread
 * runs). Code has its own, denser rate (--pmac-fetch-sample-threshold, default 1/8): a burst's code
 * is a few hot 256-byte blocks, and at the data's 1/16 whether the hottest are in the sample
 * decides its miss count. cg_mpi4py-n2-3000's rank-0 steady bursts, fully associative 32 KiB L1i,
 * misses an iteration from one trace at 1/4 split by hash range into disjoint samples: 2,326 at
 * 1/4; 2,429 and 2,246 at 1/8; 1,523, 3,174, 2,825 and 1,587 at 1/16 (callgrind: 2,473). 1/4 costs
 * the reuse analysis 4x the code's words at 1/16 and put a one-rank trace of cg_mpi4py past 50x
 * its native run (bench/memtrace_accuracy: 63.5x, 1/16: 36.4x). A sample is by hash range, so the
 * code sampled at a lower rate is a subset of the code sampled at a higher one. */
static void sample_fetch(IRSB *out, Addr a, Counters *fn) {
    ULong top = hash_top(a);
    if (top >= clo_fetch_threshold) return;
    IRTemp g = newIRTemp(out->tyenv, Ity_I1);
    addStmtToIRSB(out, IRStmt_WrTmp(g, IRExpr_Binop(Iop_CmpLT64U, mk_u64(top),
                                                    mk_load(out, (ULong)(Addr)&g_fetch_threshold))));
    IRDirty *d = unsafeIRDirty_0_N(2, "acc_sample", VG_(fnptr_to_fnentry)(&acc_sample),
                                   mkIRExprVec_2(mk_u64(a), mk_u64(fn_tag(fn) | 2)));
    d->guard = IRExpr_RdTmp(g);
    addStmtToIRSB(out, IRStmt_Dirty(d));
}

/* A load or store: kept for the reuse sample when its 256-byte block's hash is below g_threshold
 * (inline test). While an aliasing window runs g_threshold lets every access through and the
 * call (acc_access) tests the sample's own threshold again: the window costs nothing inline. */
static void sample_access(IRSB *out, IRExpr *addr, Int is_store, Int size, Counters *fn) {
    ULong tag = fn_tag(fn);
    IRTemp line = newIRTemp(out->tyenv, Ity_I64);
    IRTemp h = newIRTemp(out->tyenv, Ity_I64);
    IRTemp top = newIRTemp(out->tyenv, Ity_I64);
    IRTemp g = newIRTemp(out->tyenv, Ity_I1);
    addStmtToIRSB(out, IRStmt_WrTmp(line, IRExpr_Binop(Iop_Shr64, addr, IRExpr_Const(IRConst_U8(8)))));
    addStmtToIRSB(out, IRStmt_WrTmp(h, IRExpr_Binop(Iop_Mul64, IRExpr_RdTmp(line),
                                                    IRExpr_Const(IRConst_U64(0x9E3779B97F4A7C15ULL)))));
    addStmtToIRSB(out, IRStmt_WrTmp(top, IRExpr_Binop(Iop_Shr64, IRExpr_RdTmp(h),
                                                      IRExpr_Const(IRConst_U8(64 - HASH_BITS)))));
    addStmtToIRSB(out, IRStmt_WrTmp(g, IRExpr_Binop(Iop_CmpLT64U, IRExpr_RdTmp(top),
                                                    mk_load(out, (ULong)(Addr)&g_threshold))));
    IRDirty *d = unsafeIRDirty_0_N(3, "acc_access", VG_(fnptr_to_fnentry)(&acc_access),
                                   mkIRExprVec_3(addr, IRExpr_Const(IRConst_U64(tag | (ULong)is_store | ((ULong)size << 32))),
                                                 mk_u64((ULong)(Addr)fn)));
    d->guard = IRExpr_RdTmp(g);
    addStmtToIRSB(out, IRStmt_Dirty(d));
}

static IRSB *pm_instrument(VgCallbackClosure *closure, IRSB *sb, const VexGuestLayout *layout,
                           const VexGuestExtents *vge, const VexArchInfo *archinfo_host,
                           IRType gWordTy, IRType hWordTy) {
    if (gWordTy != hWordTy) VG_(tool_panic)("host/guest word size mismatch");
    Int n_insn = 0;
    for (Int s = 0; s < sb->stmts_used; s++) if (sb->stmts[s]->tag == Ist_IMark) n_insn++;
    if (n_insn > MAX_INSNS) n_insn = MAX_INSNS;
    InsnInfo info[MAX_INSNS];
    VG_(memset)(info, 0, sizeof(InsnInfo) * (n_insn ? n_insn : 1));
    Int recur_packed = analyse(sb, info, n_insn);
    Int recur = recur_packed / REC_PACK, recur_mul = recur_packed % REC_PACK;

    IRSB *out = deepCopyIRSBExceptStmts(sb);
    Int s = 0;
    while (s < sb->stmts_used && sb->stmts[s]->tag != Ist_IMark) addStmtToIRSB(out, sb->stmts[s++]);
    Seg *seg = NULL;
    Counters *fn = NULL;
    Int i = -1;
    Addr chunk = ~(Addr)0;   /* the 32-byte chunk of code the previous instruction started in */
    Addr prev_pc = 0;
    for (; s < sb->stmts_used; s++) {
        IRStmt *st = sb->stmts[s];
        if (!st) continue;
        switch (st->tag) {
        case Ist_IMark: {
            Counters *f = fn_counters(st->Ist.IMark.addr + st->Ist.IMark.delta);
            if (f != fn) { flush_seg(out, &seg, NULL); fn = f; }
            if (!seg) seg = new_seg(fn);
            i++;
            seg->v[C_INSTR]++;
            if (i == 0) {                               /* once per execution of the block */
                seg->v[C_RECUR] += recur;
                seg->v[C_RECUR_MUL] += recur_mul;
            }
            Addr pc = st->Ist.IMark.addr + st->Ist.IMark.delta;
            if (i < n_insn && info[i].flop) {
                seg->v[C_FLOP] += info[i].flop;
                seg->v[C_DIVSQRT] += info[i].divsqrt;
                seg->v[C_FP_SCALAR + info[i].width - 1]++;
                seg->v[C_DEP_SUM] += info[i].dep;
                seg->v[C_DEP_N]++;
            }
            addStmtToIRSB(out, st);
            /* a fetch each time execution enters another chunk, or jumps back into its own (a
             * loop VEX unrolled into one superblock repeats its addresses) */
            if ((pc >> 5) != chunk || pc <= prev_pc) {
                chunk = pc >> 5;
                seg->v[C_FETCH]++;
                sample_fetch(out, pc, fn);
            }
            prev_pc = pc;
            break;
        }
        case Ist_WrTmp: {
            IRExpr *e = st->Ist.WrTmp.data;
            if (e->tag == Iex_Load && seg) {
                seg->v[C_LOADS]++;
                seg->v[C_LOAD_BYTES] += sizeofIRType(e->Iex.Load.ty);
                sample_access(out, e->Iex.Load.addr, 0, sizeofIRType(e->Iex.Load.ty), fn);
            }
            addStmtToIRSB(out, st);
            break;
        }
        case Ist_LoadG:
            if (seg) {
                IRType ty = Ity_INVALID, ty2;
                typeOfIRLoadGOp(st->Ist.LoadG.details->cvt, &ty, &ty2);
                seg->v[C_LOADS]++;
                seg->v[C_LOAD_BYTES] += sizeofIRType(ty);
                sample_access(out, st->Ist.LoadG.details->addr, 0, sizeofIRType(ty), fn);
            }
            addStmtToIRSB(out, st);
            break;
        case Ist_Store:
            if (seg) {
                seg->v[C_STORES]++;
                seg->v[C_STORE_BYTES] += sizeofIRType(typeOfIRExpr(sb->tyenv, st->Ist.Store.data));
                sample_access(out, st->Ist.Store.addr, 1, sizeofIRType(typeOfIRExpr(sb->tyenv, st->Ist.Store.data)), fn);
            }
            addStmtToIRSB(out, st);
            break;
        case Ist_StoreG:
            if (seg) {
                seg->v[C_STORES]++;
                seg->v[C_STORE_BYTES] += sizeofIRType(typeOfIRExpr(sb->tyenv, st->Ist.StoreG.details->data));
                sample_access(out, st->Ist.StoreG.details->addr, 1,
                              sizeofIRType(typeOfIRExpr(sb->tyenv, st->Ist.StoreG.details->data)), fn);
            }
            addStmtToIRSB(out, st);
            break;
        case Ist_CAS:
            if (seg) {
                Int sz = sizeofIRType(typeOfIRExpr(sb->tyenv, st->Ist.CAS.details->dataLo));
                if (st->Ist.CAS.details->dataHi) sz *= 2;
                seg->v[C_LOADS]++; seg->v[C_STORES]++;
                seg->v[C_LOAD_BYTES] += sz; seg->v[C_STORE_BYTES] += sz;
            }
            addStmtToIRSB(out, st);
            break;
        case Ist_LLSC:
            if (seg) {
                if (st->Ist.LLSC.storedata == NULL) {
                    seg->v[C_LOADS]++;
                    seg->v[C_LOAD_BYTES] += sizeofIRType(typeOfIRTemp(sb->tyenv, st->Ist.LLSC.result));
                } else {
                    seg->v[C_STORES]++;
                    seg->v[C_STORE_BYTES] += sizeofIRType(typeOfIRExpr(sb->tyenv, st->Ist.LLSC.storedata));
                }
            }
            addStmtToIRSB(out, st);
            break;
        case Ist_Dirty: {
            IRDirty *d = st->Ist.Dirty.details;
            if (seg && d->mFx != Ifx_None) {
                if (d->mFx == Ifx_Read || d->mFx == Ifx_Modify) { seg->v[C_LOADS]++; seg->v[C_LOAD_BYTES] += d->mSize; }
                if (d->mFx == Ifx_Write || d->mFx == Ifx_Modify) { seg->v[C_STORES]++; seg->v[C_STORE_BYTES] += d->mSize; }
            }
            addStmtToIRSB(out, st);
            break;
        }
        case Ist_Exit: {
            IRExpr *outcome = NULL;
            if (st->Ist.Exit.jk == Ijk_Boring) {
                IRTemp w = newIRTemp(out->tyenv, Ity_I64);
                addStmtToIRSB(out, IRStmt_WrTmp(w, IRExpr_Unop(Iop_1Uto64, st->Ist.Exit.guard)));
                outcome = IRExpr_RdTmp(w);
            }
            flush_seg(out, &seg, outcome);
            addStmtToIRSB(out, st);
            seg = new_seg(fn);
            break;
        }
        default:
            addStmtToIRSB(out, st);
        }
    }
    flush_seg(out, &seg, NULL);
    return out;
}

/* ---- set-up and output --------------------------------------------------------------- */

static Bool pm_process_cmd_line_option(const HChar *arg) {
    if VG_STR_CLO(arg, "--pmac-out", clo_out) {}
    else if VG_BINT_CLO(arg, "--pmac-sample-threshold", clo_threshold, 0, 1u << HASH_BITS) {}
    else if VG_BINT_CLO(arg, "--pmac-fetch-sample-threshold", clo_fetch_threshold, 0, 1u << HASH_BITS) {}
    else return False;
    return True;
}

static void pm_print_usage(void) {
    VG_(printf)("    --pmac-out=<file>                  summary file (%%p = pid) [pmac-vg.%%p]\n"
                "    --pmac-sample-threshold=<0..2^24>  sampled lines: hash < threshold [2^20 = 1/16]\n"
                "    --pmac-fetch-sample-threshold=<0..2^24>  the same for code [2^21 = 1/8]\n");
}

static void pm_print_debug_usage(void) {}

static void pm_fork_child(ThreadId tid) {
    is_fork_child = True;
    acc_fd = -1;
    acc_n = 0;
}

static void pm_post_clo_init(void) {
    out_path = VG_(expand_file_name)("--pmac-out", clo_out);
    HChar *acc_path = VG_(malloc)("pmac.path", VG_(strlen)(out_path) + 8);
    VG_(sprintf)(acc_path, "%s.acc", out_path);
    SysRes r = VG_(open)(acc_path, VKI_O_CREAT | VKI_O_TRUNC | VKI_O_WRONLY, VKI_S_IRUSR | VKI_S_IWUSR | VKI_S_IRGRP | VKI_S_IROTH);
    if (sr_isError(r)) {
        VG_(umsg)("pmac_vg: cannot write %s\n", acc_path);
        VG_(exit)(1);
    }
    acc_fd = sr_Res(r);
    struct { HChar magic[8]; UInt hash_bits, threshold, fetch_threshold, pad; } h;
    VG_(memset)(&h, 0, sizeof h);
    VG_(memcpy)(h.magic, "PMACVGA4", 8);
    h.hash_bits = HASH_BITS;
    h.threshold = (UInt)clo_threshold;
    h.fetch_threshold = (UInt)clo_fetch_threshold;
    VG_(write)(acc_fd, &h, sizeof h);
    new_burst(0);
    VG_(clo_vex_control).guest_chase = False;
    VG_(atfork)(NULL, NULL, pm_fork_child);
}

static void write_all(Int fd, const void *buf, Long len) {
    const HChar *p = buf;
    while (len > 0) {
        Int k = VG_(write)(fd, p, len > (1 << 30) ? (1 << 30) : len);
        if (k <= 0) return;    /* the reader finds the file short */
        p += k;
        len -= k;
    }
}

static void pm_fini(Int exitcode) {
    if (is_fork_child) return;
    for (Seg *s = all_segs; s; s = s->next) seg_fold(s);
    acc_flush();
    if (acc_fd >= 0) VG_(close)(acc_fd);
    SysRes r = VG_(open)(out_path, VKI_O_CREAT | VKI_O_TRUNC | VKI_O_WRONLY, VKI_S_IRUSR | VKI_S_IWUSR | VKI_S_IRGRP | VKI_S_IROTH);
    if (sr_isError(r)) {
        VG_(umsg)("pmac_vg: cannot write %s\n", out_path);
        return;
    }
    Int fd = sr_Res(r);
    struct {
        HChar magic[8];
        UInt version, n_counters, hash_bits, threshold;
        Int pid;
        UInt flags;
        Long n_bursts, n_functions, n_acc_words, n_burst_functions;
        UInt fetch_threshold, pad;
    } h;
    VG_(memset)(&h, 0, sizeof h);
    VG_(memcpy)(h.magic, "PMACVGS1", 8);
    h.version = 9; h.n_counters = NC; h.hash_bits = HASH_BITS; h.threshold = (UInt)clo_threshold;
    h.fetch_threshold = (UInt)clo_fetch_threshold;
    h.pid = VG_(getpid)(); h.flags = flags;
    h.n_bursts = n_bursts; h.n_functions = n_fns; h.n_acc_words = acc_total; h.n_burst_functions = n_bf;
    write_all(fd, &h, sizeof h);
    write_all(fd, &mpi_c, sizeof mpi_c);
    write_all(fd, bursts, n_bursts * (Long)sizeof(Burst));
    for (Long k = 0; k < n_fns; k++) {
        Fn *f = fn_list[k];
        write_all(fd, f->name, NAME_LEN);
        write_all(fd, f->obj, NAME_LEN);
        write_all(fd, &f->c, sizeof f->c);
    }
    write_all(fd, bf, n_bf * (Long)sizeof(BurstFn));
    VG_(write)(fd, "PMACEND1", 8);
    VG_(close)(fd);
}

static void pm_start_client_code(ThreadId tid, ULong blocks_dispatched) {
    Bool other = tid != 1;   /* valgrind numbers the main thread 1 */
    if (other != other_thread) {
        other_thread = other;
        set_target();
    }
}

static void pm_pre_clo_init(void) {
    VG_(details_name)("pmac_vg");
    VG_(details_version)("1");
    VG_(details_description)("pmac memory signature: counts per burst and function, sampled reuse");
    VG_(details_copyright_author)("pmac authors");
    VG_(details_bug_reports_to)("pmac");
    VG_(details_avg_translation_sizeB)(400);
    VG_(basic_tool_funcs)(pm_post_clo_init, pm_instrument, pm_fini);
    VG_(needs_command_line_options)(pm_process_cmd_line_option, pm_print_usage, pm_print_debug_usage);
    VG_(needs_client_requests)(pm_client_request);
    VG_(track_start_client_code)(pm_start_client_code);
}

VG_DETERMINE_INTERFACE_VERSION(pm_pre_clo_init)
