// Moved to <peal/presets/vision_rope.hpp> (docs/architecture.md §1). This forwarding header keeps
// `#include <peal/vision_rope.hpp>` working for one release (peal 0.1.x) and is removed after it.
#pragma once

#include "presets/vision_rope.hpp"
