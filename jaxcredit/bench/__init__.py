"""Benchmarks: ``estimators`` (multistep functions vs rlax) and ``train`` (the engine vs PureJaxRL)."""
