import { LabIcon } from '@jupyterlab/ui-components';

const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <path class="jp-icon3" fill="#616161" d="M3 3h2v16h16v2H3z"/>
  <path fill="#FF6F00" d="M7 15.6l4.2-5.4 3.3 2.8L19.6 6l1.6 1.2-6.3 8.6-3.4-2.9-2.9 3.9z"/>
</svg>`;

/**
 * The icon of the toolbar button, the launcher card and the side panel.
 */
export const tensorboardIcon = new LabIcon({
  name: 'portal-tensorboard:icon',
  svgstr: svg
});
