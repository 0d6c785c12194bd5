"""Analysis tools: scheme comparison on a trained model's vector field, and stability studies."""
from .schemes import applicable_schemes, discretized, empirical_order, evaluate_trained, scheme_errors

__all__ = ["applicable_schemes", "discretized", "empirical_order", "evaluate_trained", "scheme_errors"]
