/* The analyzer's outputs: the human report (most important line first) and the JSON report
 * whose schema docs/analyzer.md documents. */
#ifndef WD_AZ_REPORT_H
#define WD_AZ_REPORT_H

#include <stdio.h>

#include "verdict.h"

void wd_az_report_text(FILE *f, const wd_az_result *res, int verbose);
/* Returns 0, or -1 when the document could not be built. */
int wd_az_report_json(FILE *f, const wd_az_result *res);
/* A self-contained HTML page (report_html.c). Returns 0, or -1 on a write error. */
int wd_az_report_html(FILE *f, const wd_az_result *res);

#endif
