// Thread-safety annotations: clang's -Wthread-safety attributes behind short macros.
//
// Owns: the macros only. Under clang they expand to the capability attributes of clang's thread
// safety analysis (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html); under any other
// compiler (the release build is GCC) they expand to nothing, so they cost nothing and change no
// code. CI compiles every file that includes this header with
// `clang++ -fsyntax-only -Wthread-safety -Werror=thread-safety` (scripts/check-thread-safety.py),
// so an access to a GUARDED_BY member without its mutex is a CI failure.
//
// Use them with strata::Mutex / MutexLock (base/mutex.h); std::mutex is not a capability.
//   Mutex mu_;
//   int count_ GUARDED_BY(mu_) = 0;
//   void BumpLocked() REQUIRES(mu_);   // caller holds mu_
//   void Bump() EXCLUDES(mu_);         // takes mu_ itself
// How-to for a module: src/base/README.md ("Thread-safety annotations").
#pragma once

#if defined(__clang__)
#define STRATA_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define STRATA_THREAD_ANNOTATION(x)
#endif

// A class whose objects are capabilities (a mutex). `name` appears in the diagnostics.
#define CAPABILITY(name) STRATA_THREAD_ANNOTATION(capability(name))
// An RAII class that acquires a capability in its constructor and releases it in its destructor.
#define SCOPED_CAPABILITY STRATA_THREAD_ANNOTATION(scoped_lockable)

// Data members: reading or writing requires holding `x` (PT_: the pointee, not the pointer).
#define GUARDED_BY(x) STRATA_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) STRATA_THREAD_ANNOTATION(pt_guarded_by(x))

// Lock order: this mutex is acquired after / before the listed ones.
#define ACQUIRED_AFTER(...) STRATA_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) STRATA_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))

// Functions: the caller must hold (REQUIRES) or must not hold (EXCLUDES) the capabilities.
#define REQUIRES(...) STRATA_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) STRATA_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define EXCLUDES(...) STRATA_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// Functions that acquire / release a capability (no argument: `this`).
#define ACQUIRE(...) STRATA_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) STRATA_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) STRATA_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) STRATA_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) STRATA_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))

// A function that returns the capability (e.g. an accessor of a member mutex).
#define RETURN_CAPABILITY(x) STRATA_THREAD_ANNOTATION(lock_returned(x))
// A run-time check that the capability is held; after the call the analysis assumes it is.
#define ASSERT_CAPABILITY(x) STRATA_THREAD_ANNOTATION(assert_capability(x))

// Escape hatch for code the analysis cannot follow (say why in a comment next to it).
#define NO_THREAD_SAFETY_ANALYSIS STRATA_THREAD_ANNOTATION(no_thread_safety_analysis)
