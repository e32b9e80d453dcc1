"""Benchmarks of speed and quality (`mavias bench core|criteria|discovery|pipeline|data|serve`), recorded in
BENCHMARKS.md."""
