#include "train/run_report.h"
#include "core/error.h"
#include "core/text_file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The page, embedded at build time from run_report_page.html (cmake/embed/embed_file.cmake).
extern const char run_report_page_html[];

// A log far beyond any run's (a million steps of a wide model) is refused, not read.
#define REPORT_LOG_MAX ((size_t)4 << 30)

// The page splits at this marker: the logs' JSON goes between the two halves.
static const char data_marker[] = "/*@BAGUALU_DATA@*/";

// One JSON text into the page: inside a <script> nothing may read as "</script>" or
// "<!--", so every '<' (only ever inside a JSON string) is written as \u003c.
static int put_json(FILE *f, const char *text) {
    for (const char *p = text; *p; p++) {
        if (*p == '<') fputs("\\u003c", f);
        else fputc(*p, f);
    }
    return ferror(f) ? BG_ERR : BG_OK;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

// {"name": "...", "lines": [ ... ]} for one log; every line parsed (and so checked).
static int put_log(FILE *f, const char *path) {
    char *text = bg_read_text_file(path, REPORT_LOG_MAX, NULL);
    if (!text) return BG_ERR;
    cJSON *name = cJSON_CreateString(base_name(path));
    char *name_text = cJSON_PrintUnformatted(name);
    cJSON_Delete(name);
    fputs("{\"name\":", f);
    put_json(f, name_text ? name_text : "\"?\"");
    free(name_text);
    fputs(",\"lines\":[", f);
    long line_no = 0, objects = 0;
    int rc = BG_OK;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        line_no++;
        if (line[strspn(line, " \t\r")] == '\0') continue;
        cJSON *j = cJSON_Parse(line);
        if (!j || !cJSON_IsObject(j)) {
            cJSON_Delete(j);
            rc = bg_error("%s:%ld: not a JSON object (a metrics log has one per line)", path, line_no);
            break;
        }
        char *out = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        if (!out) {
            rc = bg_error("%s:%ld: out of memory", path, line_no);
            break;
        }
        if (objects++) fputc(',', f);
        put_json(f, out);
        free(out);
    }
    free(text);
    if (rc == BG_OK && objects == 0) rc = bg_error("%s: empty metrics log (no JSON lines)", path);
    fputs("]}", f);
    return rc;
}

int run_report_write(const char *const *logs, int n_logs, const char *out_path, int *bad_input) {
    int dummy;
    if (!bad_input) bad_input = &dummy;
    *bad_input = 1;
    if (n_logs < 1) return bg_error("report: no metrics log given");
    const char *cut = strstr(run_report_page_html, data_marker);
    if (!cut) return bg_error("report: the built-in page has no data marker");
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", out_path) >= (int)sizeof tmp)
        return bg_error("%s: path too long", out_path);
    *bad_input = 0;
    FILE *f = fopen(tmp, "w");
    if (!f) return bg_error("%s: cannot write the report (%s)", tmp, strerror(errno));
    fwrite(run_report_page_html, 1, (size_t)(cut - run_report_page_html), f);
    fputc('[', f);
    int rc = BG_OK;
    for (int i = 0; i < n_logs && rc == BG_OK; i++) {
        if (i) fputc(',', f);
        rc = put_log(f, logs[i]);
    }
    fputc(']', f);
    if (rc != BG_OK) *bad_input = 1;
    fputs(cut + sizeof data_marker - 1, f);
    int werr = ferror(f);
    if (fclose(f) != 0) werr = 1;
    if (rc == BG_OK && werr) rc = bg_error("%s: write failed (%s)", tmp, strerror(errno));
    if (rc == BG_OK && rename(tmp, out_path) != 0)
        rc = bg_error("%s: cannot rename into place (%s)", out_path, strerror(errno));
    if (rc != BG_OK) remove(tmp);
    return rc;
}
