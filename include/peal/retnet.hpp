// Moved to <peal/presets/retnet.hpp> (docs/architecture.md §1). This forwarding header keeps
// `#include <peal/retnet.hpp>` working for one release (peal 0.1.x) and is removed after it.
#pragma once

#include "presets/retnet.hpp"
