// SPDX-License-Identifier: Apache-2.0
// ThreadSanitizer and Halide's runtime, which TSan cannot instrument (it is machine code that
// Halide ships). TSan sees the memory that runtime touches through intercepted calls (a
// pthread_mutex_lock on a parking slot that lives on another thread's stack, a memset of the work
// queue) but not the runtime's own atomics that order those accesses, so it reports races that
// are none. These annotations tell it what happens there; in other builds they are empty.
//  - PoolScope: ropegen hands control to Halide's pool (or is one of its workers). Accesses are
//    ignored until the scope ends; synchronisation through pthread still counts.
//  - CallbackScope: the pool calls back into ropegen. Accesses are checked again inside, in full.
//  - handoff_release / handoff_acquire: a loop's closure passes from the caller to the tasks and
//    back under the pool's lock; they name that hand-off.
#pragma once

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ROPEGEN_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) && !defined(ROPEGEN_TSAN)
#define ROPEGEN_TSAN 1
#endif

#ifdef ROPEGEN_TSAN
#include <sanitizer/tsan_interface.h>

// TSan's dynamic annotations (no header declares them).
extern "C" void AnnotateIgnoreReadsBegin(const char *file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char *file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char *file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char *file, int line);
#endif

namespace ropegen::tsan {

#ifdef ROPEGEN_TSAN
// How many PoolScopes the thread is in, minus those a CallbackScope suspended.
inline thread_local int t_pool_depth = 0;

inline void ignore_accesses(bool ignore) {
    if (ignore) {
        AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
        AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
    } else {
        AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
        AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    }
}

class PoolScope {
public:
    PoolScope() {
        t_pool_depth++;
        ignore_accesses(true);
    }
    ~PoolScope() {
        ignore_accesses(false);
        t_pool_depth--;
    }
    PoolScope(const PoolScope &) = delete;
    PoolScope &operator=(const PoolScope &) = delete;
};

class CallbackScope {
public:
    CallbackScope() : suspended_(t_pool_depth) {
        for (int i = 0; i < suspended_; i++) {
            ignore_accesses(false);
        }
        t_pool_depth = 0;
    }
    ~CallbackScope() {
        for (int i = 0; i < suspended_; i++) {
            ignore_accesses(true);
        }
        t_pool_depth = suspended_;
    }
    CallbackScope(const CallbackScope &) = delete;
    CallbackScope &operator=(const CallbackScope &) = delete;

private:
    const int suspended_;
};

inline void handoff_release(const void *closure) {
    __tsan_release(const_cast<void *>(closure));
}
inline void handoff_acquire(const void *closure) {
    __tsan_acquire(const_cast<void *>(closure));
}
#else
struct PoolScope {
    PoolScope() {}  // user-provided: a scope variable is not "unused"
};
struct CallbackScope {
    CallbackScope() {}
};
inline void handoff_release(const void *) {
}
inline void handoff_acquire(const void *) {
}
#endif

}  // namespace ropegen::tsan
