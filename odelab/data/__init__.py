"""Data: sequence tasks generated offline with odelab's solvers and cached on disk; generated graphs and readers of
local graph, MNIST, EigenWorms, BIDMC32, Person Activity, UCI HAR and IMDB files (never downloaded)."""
from .adding import adding
from .bidmc import bidmc
from .copy import copy_task
from .csv_series import csv_series
from .delay_oscillators import enso, mackey_glass
from .eigenworms import eigenworms
from .fhn import fitzhugh_nagumo
from .frequency import frequency
from .har import har2
from .imdb import imdb
from .graph_files import load_graph, load_planetoid, load_webkb
from .graphs import GraphData, grid_graph, homophily, random_partition_graph, stochastic_block_model
from .mnist import mnist
from .neural_ode import duffing, spiral
from .ode_series import lorenz63, lorenz96, one_step_dataset
from .person_activity import person_activity

__all__ = ["fitzhugh_nagumo", "enso", "mackey_glass", "adding", "frequency", "copy_task", "spiral", "duffing", "csv_series", "GraphData",
           "grid_graph", "random_partition_graph", "stochastic_block_model", "homophily", "load_planetoid",
           "load_webkb", "load_graph", "mnist", "eigenworms", "bidmc", "one_step_dataset", "lorenz63", "lorenz96",
           "person_activity", "har2", "imdb"]
