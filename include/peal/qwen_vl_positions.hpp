// Moved to <peal/models/qwen_vl_positions.hpp> (docs/architecture.md §1). This forwarding header keeps
// `#include <peal/qwen_vl_positions.hpp>` working for one release (peal 0.1.x) and is removed after it.
#pragma once

#include "models/qwen_vl_positions.hpp"
