"""Attempts at a minimal reproducer of XLA:CPU's crash in the compilation cache (README.md).

    python experiments/compile_cache/stress.py DIR 1500            # write 1,500 programs ...
    python experiments/compile_cache/stress.py DIR 1500            # ... and read them back
    python experiments/compile_cache/stress.py DIR 600 --busy      # while a program is running
    S=experiments/compile_cache/stress.py; python $S DIR 600 & python $S DIR 600  # two at once

Each call compiles N small distinct programs (a constant differs) through JAX's persistent
cache in DIR with no compile-time floor, so every program is serialised on the first call and
deserialised on the next. ``--busy`` keeps a larger program in flight (asynchronous dispatch)
while each one is compiled and cached. Two calls at once on one folder read each other's
half-written entries. None of these crashed on jaxlib 0.11.2; the exit status says.
"""

import argparse

import jax
import jax.numpy as jnp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cache_dir")
    parser.add_argument("programs", type=int)
    parser.add_argument("--busy", action="store_true")
    args = parser.parse_args()
    jax.config.update("jax_compilation_cache_dir", args.cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    heavy = jax.jit(lambda m: jax.lax.fori_loop(0, 20, lambda i, a: jnp.tanh(a @ m), m))
    busy = jnp.ones((384, 384)) / 384
    x = jnp.ones((64,))
    for i in range(args.programs):
        if args.busy:
            busy = heavy(busy)  # still running while the next program compiles and is cached
        program = jax.jit(lambda x, c=float(i + 1): jnp.tanh(x * c) @ x + jnp.sum(jnp.sin(x / c)))
        y = program(x)
        if not args.busy:
            y.block_until_ready()
    busy.block_until_ready()
    print(f"{args.programs} programs through {args.cache_dir}: no crash")


if __name__ == "__main__":
    main()
