// Moved to <peal/presets/mrope.hpp> (docs/architecture.md §1). This forwarding header keeps
// `#include <peal/mrope.hpp>` working for one release (peal 0.1.x) and is removed after it.
#pragma once

#include "presets/mrope.hpp"
