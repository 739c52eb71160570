/*
 * image_test_writer.h - the tests' way of writing an image in one process:
 * a temporary directory (gs_image_tmp_create), a writer into it
 * (gs_image_writer_open_in), then seal and publish on commit. The tool itself
 * always writes and publishes apart (image.h, "writing in one process,
 * publishing in another"); unit tests, the fuzz seeds and tests/apps use this.
 */
#ifndef GPUSNAP_TESTS_IMAGE_TEST_WRITER_H
#define GPUSNAP_TESTS_IMAGE_TEST_WRITER_H

#include "image/image.h"

/*
 * Starts an image that will replace DIR on commit: gs_image_tmp_create with
 * opts' source_pid, source_comm and replace, and a writer into it. opts may
 * be NULL.
 */
int image_test_writer_open(const char *dir, const struct gs_image_writer_opts *opts, struct gs_image_writer **w,
			   struct gs_err *err);
/*
 * Seals the image (gs_image_writer_seal) and publishes it at DIR
 * (gs_image_publish). Always consumes w: on failure the temporary directory is
 * removed and an old DIR is left as it was. Only for writers from
 * image_test_writer_open.
 */
int image_test_writer_commit(struct gs_image_writer *w, struct gs_err *err);
/*
 * gs_image_writer_abort, and for a writer from image_test_writer_open the
 * removal of its temporary directory. NULL is allowed.
 */
void image_test_writer_abort(struct gs_image_writer *w);

#endif
