"""HTML pages of the site, one module per page: ``index``, ``dataset`` (and its standalone copy), ``structure``,
``methodology``, ``calibration``, ``crossdataset``; ``frame`` is what they share (the frame, file names, navigation, plots).

Pages are ``string.Template`` strings filled from the results JSON; plots come from ``report.figures``.
"""

from .calibration import calibration_page
from .crossdataset import CROSS_DATASET_PAGE, crossdataset_page
from .dataset import dataset_page, standalone_dataset_page
from .frame import CALIBRATION_PAGE, dataset_page_name, structure_page_name
from .index import index_page
from .methodology import methodology_page
from .structure import structure_page

__all__ = [
    "CALIBRATION_PAGE",
    "CROSS_DATASET_PAGE",
    "calibration_page",
    "crossdataset_page",
    "dataset_page",
    "dataset_page_name",
    "index_page",
    "methodology_page",
    "standalone_dataset_page",
    "structure_page",
    "structure_page_name",
]
