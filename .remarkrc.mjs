/**
 * The link check of the repository's markdown (`npm run check:shape`): every relative link and
 * image names a file or folder that exists, and every `#anchor` a heading of the markdown file it
 * points into (GitHub's slugs). Links to other hosts are not followed: the check runs offline, so
 * it names no remote (`repository: false`). `#L10` and `#L10-L20` are line anchors into a file.
 */
import remarkValidateLinks from 'remark-validate-links';

export default {
  plugins: [
    [
      remarkValidateLinks,
      {
        repository: false,
        root: '.',
        urlConfig: { headingPrefix: '#', lines: true },
      },
    ],
  ],
};
