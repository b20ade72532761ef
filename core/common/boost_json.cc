// Boost.JSON's implementation, compiled once here (Boost 1.81 is header-only
// for it): every user of boost/json.hpp links lumen_json (the timeline, the
// head's dashboard endpoint, tests).
#include <boost/json/src.hpp>
