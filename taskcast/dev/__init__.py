"""Developer tools that run on a source checkout (they need deploy/ and scripts/): the local
production topology (:mod:`taskcast.dev.topology`, ``make topology``) and the child-process and
free-port primitives it, the benchmarks and the tests share (:mod:`taskcast.dev.procs`)."""
