/* shardd/update.h — moved to common/update.h (the config server uses it too); this forwarding
 * header lives only until every shardd file includes common/update.h directly. */
#include "common/update.h"
