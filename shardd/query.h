/* shardd/query.h — moved to common/query.h (the config server uses it too); this forwarding
 * header lives only until every shardd file includes common/query.h directly. */
#include "common/query.h"
