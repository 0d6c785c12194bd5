"""Training: the loop (model selection, checkpoints, exact resume), data-parallel training, one ``run_fit`` for
every command that trains, ``load_run`` for a run it wrote, results and plots, and the papers' tables (``reproduce``)."""
from .loop import NonFiniteLoss, TrainConfig, fit, predict, rmse
from .run import FitError, FitSpec, build_regressor, model_keywords, run_fit
from .saved import RunError, load_run, run_data

__all__ = ["fit", "TrainConfig", "NonFiniteLoss", "predict", "rmse", "run_fit", "FitSpec", "FitError", "build_regressor",
           "model_keywords", "load_run", "run_data", "RunError"]
