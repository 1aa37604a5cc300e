"""Earth-Agent's tool surface: the 83 tool names Earth-Bench's reference calls use, with their
argument schemas, registered in :data:`~earthrl.envs.tools.registry.TOOLS` as surface
``"earthagent"`` (shown by ``env.toolset=earthbench``; the ``all`` and ``skills`` toolsets keep to
EarthRL's own tools).

Sources of the schemas (Earth-Agent, opendatalab/Earth-Agent, MCP servers' tool functions):

- **Earth-Agent's signature** (:data:`FROM_EARTH_AGENT`, 52 tools): the tools whose definition we
  read in the public repository's ``agent/tools/Statistics.py`` (commit ae155eab) and
  ``agent/tools/Perception.py`` (commit 5df54a934f3e, Earth-Bench's), e.g.
  ``calc_batch_image_mean(file_list, uint8=False)``, ``calculate_threshold_ratio(image_paths,
  threshold=0.75, mode='above', band_index=0)``, ``SAM2(input_image_path, bbox, output_path)``:
  their arguments, defaults and meanings are Earth-Agent's.
- **Derived from the recorded calls** (the other 31, e.g. the index, inversion and time-series
  tools): their servers (``Index``, ``Inversion``, ``Analysis``) are not in the copy of the
  repository we could read (forks carry a later version whose index tools take batches; where it
  keeps a single-file tool, e.g. ``calculate_ndwi(input_nir_path, input_swir_path, output_path)``,
  the names agree with the recorded ones). The arguments are those Earth-Bench's reference calls
  pass (1,335 in ``question.json``'s dialogs, 1,895 in ``extracted_tool_calls_GT.json``), typed by
  the values they pass, required when every recorded call passes them.

For both, every argument name a recorded call passes is accepted, because Earth-Bench's
references sometimes call a tool with another tool's arguments (``calculate_ndwi(file_list=…)``,
``calc_batch_image_mean(input_red_path=…, method=…)``): a schema that refused them would make its
own reference trajectories fail. Where two names mean the same argument in the recordings
(``input_image_path`` / ``image_path``, ``output_path`` / ``output_filename`` / ``save_name``), the
second is an alias of the first (pydantic ``validation_alias``): both validate into the first
name, which is what the prompt shows.

``env.mode=replay`` answers a call from the recorded output of a matching reference call
(:mod:`earthrl.envs.core.replay`). In ``execute`` mode the computational tools of :data:`EXECUTE`
run on the task's files (:mod:`earthrl.envs.tools.earthagent_rasters`, ``earthagent_numbers``,
``earthagent_stats``, ``earthagent_geometry``, ``earthagent_thermal``): every tool but the model tools
(:data:`MODEL_TOOLS`), which answer a ``replay_only`` error observation saying so.
"""

from __future__ import annotations

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.tools.arg_spec import spec_model
from earthrl.envs.tools.earthagent_geometry import EXECUTE as GEOMETRY_TOOLS
from earthrl.envs.tools.earthagent_numbers import EXECUTE as NUMBER_TOOLS
from earthrl.envs.tools.earthagent_rasters import EXECUTE as RASTER_TOOLS
from earthrl.envs.tools.earthagent_stats import EXECUTE as STATS_TOOLS
from earthrl.envs.tools.earthagent_thermal import EXECUTE as THERMAL_TOOLS
from earthrl.envs.tools.registry import Args, ToolContext, ToolResult, register_tool

SURFACE = "earthagent"

#: Tools whose argument list, defaults and meaning follow Earth-Agent's published definition
#: (``agent/tools/Statistics.py``); the others are derived from the recorded calls.
FROM_EARTH_AGENT = frozenset({
    # agent/tools/Statistics.py
    "calc_batch_image_mean", "calc_batch_image_max", "calc_batch_image_sum", "calc_batch_image_skewness",
    "calc_batch_image_mean_mean", "calc_batch_image_mean_max_min", "calc_batch_image_mean_threshold",
    "calc_batch_image_hotspot_percentage", "calc_batch_image_hotspot_tif", "calc_batch_fire_pixels",
    "coefficient_of_variation", "skewness", "kurtosis", "mean", "max_value_and_index", "min_value_and_index",
    "difference", "division", "multiply", "percentage_change", "kelvin_to_celsius", "ceil_number",
    "get_list_object_via_indexes", "calculate_threshold_ratio", "create_fire_increase_map",
    "identify_fire_prone_areas", "get_percentile_value_from_image", "image_division_mean",
    "calculate_intersection_percentage", "calculate_multi_band_threshold_ratio", "count_pixels_satisfying_conditions",
    "count_images_exceeding_threshold_ratio", "average_ratio_exceeding_threshold",
    "count_images_exceeding_mean_multiplier", "calculate_band_mean_by_condition", "calc_threshold_value_mean",
    "calculate_tif_average", "calculate_tif_difference", "subtract", "calculate_area", "apply_cloud_mask",
    # agent/tools/Perception.py
    "count_above_threshold", "count_skeleton_contours", "bboxes2centroids", "centroid_distance_extremes",
    "calculate_bbox_area", "MSCN", "SM3Det", "RemoteSAM", "InstructSAM", "SAM2", "ChangeOS"})


# family, domain and skills by kind of tool
_KINDS = {
    "files": ("SPA", "Data & Preprocessing", ("spectral_index", "lst_inversion", "water_flood", "vegetation_drought",
                                               "change_trend", "land_cover", "cloud_masking")),
    "index": ("PRA", "Physical & GIS Analytics", ("spectral_index", "water_flood")),
    "thermal": ("PRA", "Physical & GIS Analytics", ("lst_inversion", "vegetation_drought")),
    "cloud": ("SPA", "Data & Preprocessing", ("cloud_masking",)),
    "vision": ("SPA", "AI Interpretation", ("land_cover",)),
    "stats": ("SAA", "Spatio-Temporal Analysis", ("spectral_index", "lst_inversion", "water_flood",
                                                   "vegetation_drought", "change_trend", "land_cover")),
    "trend": ("SAA", "Spatio-Temporal Analysis", ("change_trend",)),
    "math": ("SAA", "Spatio-Temporal Analysis", ("spectral_index", "lst_inversion", "water_flood",
                                                  "vegetation_drought", "change_trend", "land_cover")),
}

_TURBIDITY = "input_red_path:str, method:str, a:num, b:num, output_path|output_filename:str"
_NIR_SWIR = "input_nir_path:str, input_swir_path:str, output_path:str"

#: name -> (kind, output kind, description, arguments). Arguments: ``name[|alias…]:type[!][=default]``
#: (``!`` required; types: :data:`~earthrl.envs.tools.arg_spec.TYPES`).
SPECS: dict[str, tuple[str, str, str, str]] = {
    "get_filelist": ("files", "catalogue", "List the files of a data folder.", "dir_path:str!"),
    "mcp-base_get_filelist": ("files", "catalogue", "List the files of a data folder (MCP base server).",
                              "dir_path:str!"),
    # spectral indices (Index server)
    "calculate_ndvi": ("index", "raster", "NDVI from red and NIR band files.",
                       "red_band_file:str!, nir_band_file:str!, output_file:str!"),
    "calculate_ndwi": ("index", "raster", "NDWI from NIR and SWIR band files.",
                       f"{_NIR_SWIR}, file_list:list, sr_band_path:str, qa_pixel_path:str"),
    "calculate_nbr": ("index", "raster", "Normalized burn ratio from NIR and SWIR band files.",
                      f"{_NIR_SWIR}, file_list:list"),
    "calculate_ndti": ("index", "raster", "Turbidity index NDTI from red and green band files.",
                       "input_red_path:str, input_green_path:str, output_path:str, input_pairs:list"),
    "calculate_ndsi": ("index", "raster", "Snow index NDSI from green and SWIR band files.",
                       "input_green_path:str!, input_swir_path:str!, output_filename|output_path:str!"),
    "calculate_batch_ndsi": ("index", "raster", "NDSI for lists of green and SWIR band files.",
                             "green_file_list:list!, swir_file_list:list!, output_path_list:list!"),
    "calculate_water_turbidity_ntu": ("index", "raster", "Water turbidity in NTU from a red band file.",
                                      f"{_TURBIDITY}, file_list:list"),
    "band_ratio": ("index", "raster", "Band ratio water vapour retrieval from MODIS band files.",
                   "sur_refl_b02_path:path!, sur_refl_b05_path:path!, sur_refl_b17_path:path!, "
                   "sur_refl_b18_path:path!, sur_refl_b19_path:path!, output_path:path!"),
    "apply_cloud_mask": ("cloud", "raster", "Mask clouds of a band file with its QA_PIXEL file.",
                         "sr_band_path:str, qa_pixel_path:str, output_path:str!, input_nir_path:str, "
                         "input_swir_path:str"),
    # land surface temperature (Inversion server)
    "lst_single_channel": ("thermal", "raster", "Single-channel LST from brightness temperature and red/NIR.",
                           "bt_path:path!, red_path:path!, nir_path:path!, output_path:path!"),
    "lst_multi_channel": ("thermal", "raster", "Multi-channel LST from MODIS bands 31 and 32.",
                          "band31_path:path!, band32_path:path!, output_path:path!"),
    "split_window": ("thermal", "raster", "Split-window LST from bands 31/32 and their emissivities.",
                     "band31_path:path!, band32_path:path!, emissivity31_path:path!, emissivity32_path:path!, "
                     "parameter:str!, output_path:path!"),
    "modis_day_night_lst": ("thermal", "raster", "LST from MODIS day and night brightness and emissivity.",
                            "BT_day_path:path!, BT_night_path:path!, Emis_day_path:path!, Emis_night_path:path!, "
                            "output_path:path!"),
    "temperature_emissivity_separation": ("thermal", "raster", "Temperature-emissivity separation of TIR bands.",
                                          "tir_band_paths:list!, representative_band_index:int!, output_path:str!"),
    "ttm_lst": ("thermal", "raster", "LST by the three-temperature model from TIR bands.",
                "tir_band_paths:list!, wavelengths:list!, output_path:str!"),
    "ATI": ("thermal", "raster", "Apparent thermal inertia from day/night temperature and albedo.",
            "day_temp_path:path!, night_temp_path:path!, albedo_path:path!, output_path:path!"),
    "compute_tvdi": ("thermal", "raster", "TVDI drought index from NDVI and LST files.",
                     "ndvi_path:path!, lst_path:path!, output_path:path!, edges:str='earth_agent'"),
    "calculate_max_lst_by_ndvi": ("thermal", "number", "Maximum LST over pixels selected by an NDVI threshold.",
                                  "red_path:str!, nir_path:str!, lst_path:str!, ndvi_threshold:num!, mode:str!"),
    "calculate_mean_lst_by_ndvi": ("thermal", "number", "Mean LST over pixels selected by an NDVI threshold.",
                                   "red_paths:path!, nir_paths:path!, lst_paths:path!, ndvi_threshold:num!, mode:str!"),
    # perception (Perception server and detection models)
    "MSCN": ("vision", "metadata", "Scene classification of an image.", "input_image_path:str!"),
    "SM3Det": ("vision", "table", "Detect objects named by a text prompt (bounding boxes).",
               "text_prompt:str!, input_image_path:str!"),
    "InstructSAM": ("vision", "table", "Count and box objects named by a text prompt.",
                    "text_prompt:str!, input_image_path:str!"),
    "RemoteSAM": ("vision", "table", "Segment objects named by a text prompt.", "input_image_path|image_path:str!, text_prompt:str!"),
    "SAM2": ("vision", "mask", "Segment the objects inside bounding boxes.", "input_image_path|image_path:str!, bbox|bboxes:list!, output_path|save_name:str"),
    "ChangeOS": ("vision", "mask", "Building damage change detection between two images.",
                 "pre_image_path:str!, post_image_path:str!, output_path:str!"),
    "bboxes2centroids": ("vision", "table", "Centroids of bounding boxes.", "bboxes:list!"),
    "centroid_distance_extremes": ("vision", "number", "Closest and farthest pair of centroids.", "centroids:list!"),
    "calculate_bbox_area": ("vision", "number", "Ground area of bounding boxes at a pixel size.", "bboxes:list!, gsd:optnum=None"),
    "calculate_area": ("vision", "number", "Area of the foreground pixels of a mask.", "input_image_path|image_path:str!, gsd:optnum!"),
    "count_skeleton_contours": ("vision", "number", "Count skeleton contours of a binary image.", "image_path|input_image_path:str!"),
    "count_above_threshold": ("vision", "number", "Count pixels above a threshold.", "file_path:str!, threshold:num!"),
    # image statistics (Statistics server: Earth-Agent's signatures)
    "calc_single_image_mean": ("stats", "number", "Mean pixel value of an image.", "file_path:str!, uint8:bool=False"),
    "calc_batch_image_mean": ("stats", "number", "Mean pixel value of each image of a list.",
                              f"file_list:list, uint8:bool=False, dir_path:str, file_path:str, x:list, "
                              f"input_green_path:str, input_nir_path:str, input_swir_path:str, {_TURBIDITY}"),
    "calc_batch_image_max": ("stats", "number", "Maximum pixel value of each image of a list.",
                             "file_list:list!, uint8:bool=False"),
    "calc_batch_image_sum": ("stats", "number", "Sum of pixel values of each image of a list.",
                             "file_list:list!, uint8:bool=False"),
    "calc_batch_image_skewness": ("stats", "number", "Skewness of pixel values of each image of a list.",
                                  f"file_list:list, uint8:bool=False, {_TURBIDITY}"),
    "calc_batch_image_mean_mean": ("stats", "number", "Average of the mean pixel values of a list of images.",
                                   "file_list:list!, uint8:bool=False"),
    "calc_batch_image_mean_max_min": ("stats", "number", "Mean, maximum and minimum of each image of a list.", "file_list:list!, uint8:bool=False"),
    "calc_batch_image_mean_threshold": ("stats", "number", "Share or count of pixels beyond a threshold per image.", "file_list:list!, threshold:num!, above:bool=True, uint8:bool=False, band_index:int=0, return_type:str='ratio'"),
    "calc_batch_image_hotspot_percentage": ("stats", "number", "Share of pixels above a threshold per image.",
                                            "file_list:list, threshold:numstr, uint8:bool=False, "
                                            f"{_NIR_SWIR}"),
    "calc_batch_image_hotspot_tif": ("stats", "mask", "Binary hotspot maps (pixels below a threshold) per image.",
                                     "file_list:list, threshold:num, output_path_list:list, uint8:bool=False, "
                                     f"{_NIR_SWIR}"),
    "calc_single_image_hotspot_percentage": ("stats", "number", "Share of an image's pixels above a threshold.",
                                             "file_path:str!, threshold:num!"),
    "calc_batch_fire_pixels": ("stats", "number", "Count fire pixels above a threshold per image.", "file_list:list!, fire_threshold:num=0"),
    "calc_threshold_value_mean": ("stats", "number", "Mean of one image where another passes a threshold.", "path1:path!, path2:path!, threshold:num=300.0"),
    "calc_severe_water_loss_percentage": ("stats", "number", "Share of pixels whose NDWI drops beyond a ratio.",
                                          "ndwi_a_path:str!, ndwi_b_path:str!, drop_ratio:num!"),
    "calc_extreme_snow_loss_percentage_from_binary_map": ("stats", "number", "Share of snow-loss pixels of a map.",
                                                          "binary_map_path:str!"),
    "calculate_threshold_ratio": ("stats", "number", "Share of pixels above a threshold per image.", "image_paths:path, threshold:num=0.75, mode:str='above', band_index:int=0, a:num, b:num"),
    "calculate_intersection_percentage": ("stats", "number", "Share of pixels passing thresholds on two images.",
                                          "path1:str!, threshold1:num!, path2:str!, threshold2:num!"),
    "calculate_band_mean_by_condition": ("stats", "number", "Mean of a band where another passes a condition.", "image_path:str!, condition_band_index:int!, condition_threshold:num!, condition_mode:str='above', target_band_index:int=0"),
    "calculate_multi_band_threshold_ratio": ("stats", "number", "Share of pixels passing conditions on bands.",
                                             "image_path:str!, band_conditions:list!"),
    "count_pixels_satisfying_conditions": ("stats", "number", "Count pixels passing conditions on bands.",
                                           "image_path:str!, band_conditions:list!"),
    "average_ratio_exceeding_threshold": ("stats", "number", "Mean share of pixels beyond a value over images.", "image_paths:path!, value_threshold:num=0.7, ratio_threshold:num=20.0, mode:str='above', verbose:boolstr=True"),
    "count_images_exceeding_threshold_ratio": ("stats", "number", "Count images whose share beyond a value is large.", "image_paths:path!, value_threshold:num=0.7, ratio_threshold:num=20.0, mode:str='above', verbose:boolstr=True"),
    "count_images_exceeding_mean_multiplier": ("stats", "number", "Count images whose mean exceeds k times the mean.", "image_paths:path!, mean_multiplier:num=1.1, mode:str='above', verbose:boolstr=True"),
    "get_percentile_value_from_image": ("stats", "number", "A percentile of an image's pixel values.",
                                        "image_path:path!, percentile:num!"),
    "image_division_mean": ("stats", "number", "Mean of the ratio of two bands of an image.", "image_path1:str!, image_path2:str, band1:int=1, band2:int=2"),
    "identify_fire_prone_areas": ("stats", "mask", "Mask of pixels above a percentile.", "file_path:str!, output_path:str!, threshold_percentile:num=75, uint8:bool=False"),
    "create_fire_increase_map": ("stats", "mask", "Mask of pixels whose change exceeds a threshold.", "change_image_path:str!, output_path:str!, threshold:num=20.0"),
    "analyze_hotspot_direction": ("stats", "metadata", "Direction in which hotspots move over images.",
                                  "file_list:list, threshold:num, output_path_list:list, hotspot_map_path:str"),
    "calculate_tif_average": ("stats", "raster", "Pixel-wise average of a list of images.", "file_list:list, output_path|output_filename:str!, uint8:bool=False, input_nir_path:str, input_swir_path:str"),
    "calculate_tif_difference": ("stats", "raster", "Pixel-wise difference of two images.", "image_a_path:str!, image_b_path:str!, output_path|output_filename:str!, uint8:bool=False"),
    "subtract": ("stats", "raster", "Pixel-wise difference of two images.",
                 "img1_path:str!, img2_path:str!, output_path:str!"),
    # time series (Analysis server)
    "compute_linear_trend": ("trend", "number", "Least-squares linear trend of a series.",
                             "y:list, x:list, file_list:list"),
    "mann_kendall_test": ("trend", "number", "Mann-Kendall trend test of a series.", f"x:list, {_TURBIDITY}"),
    "sens_slope": ("trend", "number", "Sen's slope of a series.", "x:list!"),
    "count_spikes_from_values": ("trend", "number", "Count spikes of a series.",
                                 "values:list!, spike_threshold:num=0.1"),
    "index_to_date_range": ("trend", "metadata", "Date range of a series from a start index.",
                            "dates:list!, start_index:int!"),
    # list arithmetic and statistics (Statistics server)
    "mean": ("math", "number", "Mean of a list of numbers.", f"x:list, file_list:list, input_green_path:str, "
                                                               f"{_TURBIDITY}"),
    "coefficient_of_variation": ("math", "number", "Coefficient of variation of a list of numbers.",
                                 "x:list, ddof:int=1, file_list:list"),
    "skewness": ("math", "number", "Skewness of a list of numbers.", f"x:list, bias:bool=True, {_TURBIDITY}"),
    "kurtosis": ("math", "number", "Kurtosis of a list of numbers.", "x:list!, bias:bool=True, fisher:bool=True"),
    "max_value_and_index": ("math", "number", "Maximum of a list and its index.",
                            f"x:list, file_list:list, threshold:num, {_NIR_SWIR}"),
    "min_value_and_index": ("math", "number", "Minimum of a list and its index.", "x:list!"),
    "argmax": ("math", "number", "Index of the maximum of a list.", "x:list!"),
    "get_list_object_via_indexes": ("math", "metadata", "Items of a list at given indexes.",
                                    "input_list:list!, indexes:list!"),
    "difference": ("math", "number", "Absolute difference of two numbers.",
                   "a:numstr, b:numstr, image_paths:list, threshold:num, x:list, file_list:list, "
                   "input_red_path:str, input_green_path:str, output_path:str"),
    "division": ("math", "number", "Division b / a of two numbers.", "a:num!, b:num!"),
    "multiply": ("math", "number", "Product of two numbers.", "a:numstr!, b:numstr!"),
    "percentage_change": ("math", "number", "Percentage change from a to b.", "a:num!, b:num!"),
    "kelvin_to_celsius": ("math", "number", "Convert kelvin to degrees Celsius.", "kelvin:num!"),
    "ceil_number": ("math", "number", "Round a number up.", "n:num!"),
}


def args_model(tool: str, spec: str) -> type[Args]:
    """The pydantic argument model of Earth-Agent's ``tool`` from its argument spec
    (:func:`~earthrl.envs.tools.arg_spec.spec_model`)."""
    source = "its signature" if tool in FROM_EARTH_AGENT else "derived from the recorded calls"
    return spec_model(tool, spec, f"Arguments of Earth-Agent's {tool} ({source}).", prefix="EA")


#: Earth-Agent's tools that run a detection, segmentation or classification model (or read its
#: output's geometry in image pixels): EarthRL runs none of these models, so they answer only in replay mode.
MODEL_TOOLS = frozenset({"MSCN", "SM3Det", "InstructSAM", "RemoteSAM", "SAM2", "ChangeOS"})

#: tool name -> ``fn(ctx, args) -> ToolResult`` for the tools EarthRL computes in execute mode.
EXECUTE = {**RASTER_TOOLS, **NUMBER_TOOLS, **STATS_TOOLS, **GEOMETRY_TOOLS, **THERMAL_TOOLS}


def _replay_only(ctx: ToolContext, args) -> ToolResult:
    """A model tool (:data:`MODEL_TOOLS`) in execute mode: a ``replay_only`` error observation saying why.

    Raises:
        ToolError: always (kind ``replay_only``).
    """
    raise ToolError("replay_only", f"{ctx.call.get('name')} runs a detection/classification model that EarthRL "
                                   "does not run; its results exist only as Earth-Bench's recorded outputs "
                                   "(env.mode=replay)")


def _register_all() -> None:
    for name, (kind, output_kind, description, spec) in SPECS.items():
        family, domain, skills = _KINDS[kind]
        register_tool(name, args=args_model(name, spec), description=description, domain=domain, family=family,
                      skills=skills, output_kind=output_kind, surface=SURFACE)(EXECUTE.get(name, _replay_only))
    if missing := set(SPECS) - set(EXECUTE) - MODEL_TOOLS:  # a new tool must say how it runs
        raise RuntimeError(f"Earth-Agent tools with neither an execute function nor a model: {sorted(missing)}")


_register_all()
